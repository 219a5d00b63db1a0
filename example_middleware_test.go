package ratelimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
)

// A complete net/http setup: per-API-key limits of 5 requests per second
// with bursts of 10, the health check outside the limiter.
func ExampleNewMiddleware() {
	store, _ := memorystore.New(nil)
	limiter, err := ratelimit.New(store, ratelimit.Policy{Name: "per-key", Limit: ratelimit.PerSecond(5).WithBurst(10)})
	if err != nil {
		panic(err)
	}
	mw, err := ratelimit.NewMiddleware(limiter, ratelimit.KeyByAPIKey("X-API-Key"), nil)
	if err != nil {
		panic(err)
	}
	api := http.NewServeMux()
	api.HandleFunc("GET /geocode", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	root := http.NewServeMux()
	root.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {})
	root.Handle("/", nethttp.Wrap(mw)(api))

	for i := 1; i <= 11; i++ {
		r := httptest.NewRequest("GET", "/geocode", nil)
		r.Header.Set("X-API-Key", "secret-key")
		w := httptest.NewRecorder()
		root.ServeHTTP(w, r)
		if i == 1 || i == 11 {
			// The rate-limit fields are spelled as the drafts spell them:
			// read them with the map index (Get looks for "Ratelimit").
			fmt.Printf("%d RateLimit: %s Retry-After: %q\n", w.Code, w.Header()["RateLimit"][0], w.Header().Get("Retry-After"))
		}
	}
	// Output:
	// 200 RateLimit: "per-key";r=9;t=1 Retry-After: ""
	// 429 RateLimit: "per-key";r=0;t=1 Retry-After: "1"
}
