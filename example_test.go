package ratelimit_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
)

// The seed's worked example: 5 requests per second with a capacity of 10.
// Twelve requests arrive at once: ten pass and two are refused; one second
// later five more pass.
func ExampleLimiter_Take() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // a fake clock; production stores read the real one
	store, _ := memorystore.New(&memorystore.Options{Clock: func() time.Time { return now }})
	limiter, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(5).WithBurst(10)})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 1; i <= 12; i++ {
		res, _ := limiter.Take(ctx, "client-1", 1)
		if i >= 10 {
			fmt.Printf("request %d: allowed=%v remaining=%d retry-after=%v\n", i, res.Allowed, res.Remaining, res.RetryAfter)
		}
	}
	now = now.Add(time.Second)
	passed := 0
	for range 6 {
		if res, _ := limiter.Take(ctx, "client-1", 1); res.Allowed {
			passed++
		}
	}
	fmt.Println("one second later:", passed, "passed")
	// Output:
	// request 10: allowed=true remaining=0 retry-after=0s
	// request 11: allowed=false remaining=0 retry-after=200ms
	// request 12: allowed=false remaining=0 retry-after=200ms
	// one second later: 5 passed
}

func ExampleLimit_String() {
	fmt.Println(ratelimit.PerSecond(5).WithBurst(10))
	fmt.Println(ratelimit.Per(10000, 24*time.Hour))
	fmt.Println(ratelimit.Per(2, 3*time.Second))
	fmt.Println(ratelimit.Per(1, 7*time.Second))
	fmt.Println(ratelimit.PerSecond(-5)) // invalid: written as the call
	// Output:
	// 5/s burst 10
	// 10000/d
	// 2/3s
	// 1/7s
	// PerSecond(-5) (invalid)
}

// New validates the limits and names the one at fault.
func ExampleNew_invalidLimit() {
	store, _ := memorystore.New(nil)
	_, err := ratelimit.New(store, ratelimit.Policy{Name: "api", Limit: ratelimit.PerSecond(-5)})
	fmt.Println(err)
	_, err = ratelimit.New(store, ratelimit.Policy{Name: "api", Limit: ratelimit.PerSecond(5).WithBurst(0)})
	fmt.Println(err)
	// Output:
	// ratelimit: policy "api": PerSecond(-5): the number of tokens must be positive
	// ratelimit: policy "api": PerSecond(5).WithBurst(0): the burst must be at least 1
}

// Algorithm and HeaderFormat are text values: flag.TextVar and
// configuration files take them by name.
func ExampleAlgorithm_flag() {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	var algo ratelimit.Algorithm
	var headers ratelimit.HeaderFormat
	fs.TextVar(&algo, "algorithm", ratelimit.TokenBucket, "token-bucket, leaky-police or leaky-shape")
	fs.TextVar(&headers, "headers", ratelimit.HeadersIETF, "ietf, legacy, x or none")
	if err := fs.Parse([]string{"-algorithm=leaky-shape", "-headers", "legacy"}); err != nil {
		panic(err)
	}
	a, _ := algo.MarshalText()
	h, _ := headers.MarshalText()
	fmt.Println(string(a), string(h))

	err := algo.UnmarshalText([]byte("sliding-window"))
	fmt.Println(err)
	// Output:
	// leaky-shape legacy
	// ratelimit: unknown algorithm "sliding-window": want one of ["token-bucket" "leaky-police" "leaky-shape"]
}

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
