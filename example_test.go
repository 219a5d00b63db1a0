package ratelimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
	"github.com/tokenfair/ratelimit/storetest"
)

// The seed's worked example: 5 requests per second with a capacity of 10.
// Twelve requests arrive at once: ten pass and two are refused; one second
// later five more pass.
func ExampleLimiter_Take() {
	clock := new(storetest.Clock) // a fake clock; production stores read the real one
	store, _ := memorystore.New(memorystore.WithClock(clock.Now))
	defer store.Close()
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
	clock.Advance(time.Second)
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

func ExamplePerSecond() {
	fmt.Println(ratelimit.PerSecond(5).WithBurst(10))
	fmt.Println(ratelimit.PerDay(10000))
	fmt.Println(ratelimit.Every(7 * time.Second))
	fmt.Println(ratelimit.Rate(0.5))
	// Output:
	// 5/s burst 10
	// 10000/d burst 10000
	// 1 every 7s burst 1
	// 30/min burst 1
}

func ExampleLimit_Validate() {
	fmt.Println(ratelimit.PerSecond(0).Validate())
	fmt.Println(ratelimit.PerSecond(5).WithBurst(0).Validate())
	// Output:
	// ratelimit: invalid limit: rate must be positive and finite (interval 0s)
	// ratelimit: invalid limit: burst must be at least 1, got 0
}

// A complete net/http setup: per-API-key limits of 5 requests per second
// with bursts of 10, the health check outside the limiter.
func ExampleNewMiddleware() {
	store, _ := memorystore.New()
	defer store.Close()
	limiter, err := ratelimit.New(store, ratelimit.Policy{Name: "per-key", Limit: ratelimit.PerSecond(5).WithBurst(10)})
	if err != nil {
		panic(err)
	}
	mw, err := ratelimit.NewMiddleware(limiter, ratelimit.KeyByAPIKey("X-API-Key"))
	if err != nil {
		panic(err)
	}
	api := http.NewServeMux()
	api.HandleFunc("GET /geocode", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	root := http.NewServeMux()
	root.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {})
	root.Handle("/", nethttp.Middleware(mw)(api))

	for i := 1; i <= 11; i++ {
		r := httptest.NewRequest("GET", "/geocode", nil)
		r.Header.Set("X-API-Key", "secret-key")
		w := httptest.NewRecorder()
		root.ServeHTTP(w, r)
		if i == 1 || i == 11 {
			fmt.Printf("%d RateLimit: %s Retry-After: %q\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
		}
	}
	// Output:
	// 200 RateLimit: "per-key";r=9;t=1 Retry-After: ""
	// 429 RateLimit: "per-key";r=0;t=1 Retry-After: "1"
}
