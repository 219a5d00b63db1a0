package nethttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
)

// The common case in one line: 5 requests a minute per API key, in bursts
// of up to 10, on an in-process store.
func ExampleLimitBy() {
	var handler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	handler = nethttp.LimitBy(ratelimit.Per(5, time.Minute).WithBurst(10), ratelimit.KeyByAPIKey("X-API-Key"))(handler)

	codes := map[int]int{}
	for range 11 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", "demo")
		handler.ServeHTTP(w, r)
		codes[w.Code]++
	}
	fmt.Println(codes)
	// Output:
	// map[200:10 429:1]
}

// The explicit form: a store, a limiter, a middleware, and errors instead
// of panics.
func ExampleWrap() {
	store, _ := memorystore.New(nil)
	limiter, _ := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	byIP, _ := ratelimit.KeyByIP(nil) // RemoteAddr only: no proxy is trusted
	mw, err := ratelimit.NewMiddleware(limiter, byIP, nil)
	if err != nil {
		panic(err)
	}

	handler := nethttp.Wrap(mw)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	}))
	for range 2 {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest("GET", "/", nil)) // from 192.0.2.1:1234
		fmt.Printf("%d Retry-After: %q\n", w.Code, w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 Retry-After: ""
	// 429 Retry-After: "1"
}
