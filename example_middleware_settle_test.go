package ratelimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
)

// An endpoint whose cost is known once it has answered, such as tokens
// generated: each request reserves an estimate (X-Estimate) and the handler
// settles what it produced (X-Produced). Less gives the rest back (the
// first request spends 4 of 20, so the second finds 16 and reserves 10);
// more takes it past empty, and the key waits until the debt is repaid:
// 31 of 16 leave 15 tokens of debt, at a token every 3 s, and one more for
// the next request, 48 s.
func ExampleSettle() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // a fake clock
	clock := func() time.Time { return now }
	store, _ := memorystore.New(&memorystore.Options{Clock: clock})
	limiter, err := ratelimit.New(store, ratelimit.Policy{Name: "tokens", Limit: ratelimit.Per(20, time.Minute)})
	if err != nil {
		panic(err)
	}
	mw, err := ratelimit.NewMiddleware(limiter, ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{
		ResultInContext: true, Clock: clock,
		Cost: func(r *http.Request) (int64, error) { return strconv.ParseInt(r.Header.Get("X-Estimate"), 10, 64) },
	})
	if err != nil {
		panic(err)
	}
	handler := nethttp.Wrap(mw)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		produced, _ := strconv.ParseInt(r.Header.Get("X-Produced"), 10, 64)
		if err := ratelimit.Settle(r.Context(), "requests", produced); err != nil {
			panic(err)
		}
	}))
	for _, req := range []struct{ estimate, produced string }{{"10", "4"}, {"10", "31"}, {"1", "1"}} {
		r := httptest.NewRequest("POST", "/generate", nil)
		r.Header.Set("X-API-Key", "secret-key")
		r.Header.Set("X-Estimate", req.estimate)
		r.Header.Set("X-Produced", req.produced)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Printf("reserve %s, produce %s: %d RateLimit: %s Retry-After: %q\n",
			req.estimate, req.produced, w.Code, w.Header()["RateLimit"][0], w.Header().Get("Retry-After"))
	}
	// Output:
	// reserve 10, produce 4: 200 RateLimit: "tokens";r=10;t=3 Retry-After: ""
	// reserve 10, produce 31: 200 RateLimit: "tokens";r=6;t=3 Retry-After: ""
	// reserve 1, produce 1: 429 RateLimit: "tokens";r=0;t=48 Retry-After: "48"
}
