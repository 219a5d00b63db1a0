package nethttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
)

func ExampleMiddleware() {
	store, _ := memorystore.New()
	defer store.Close()
	limiter, _ := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	byIP, _ := ratelimit.KeyByIP() // RemoteAddr only: no proxy is trusted
	mw, _ := ratelimit.NewMiddleware(limiter, byIP)

	handler := nethttp.Middleware(mw)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
