package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
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

// A batch reserves one token per item and, once answered, gives back the
// tokens of the items it did not use: the request is charged 3, not 10.
func ExampleLimiter_Refund() {
	store, _ := memorystore.New(nil)
	limiter, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.Per(10, time.Hour)})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	took, _ := limiter.Take(ctx, "client-1", 10) // the batch's 10 items
	fmt.Println("reserved, remaining", took.Remaining)
	found := 3 // the handler found 3 of them
	if err := limiter.Refund(ctx, "client-1", 10-int64(found), took); err != nil {
		panic(err)
	}
	res, _ := limiter.Take(ctx, "client-1", 0) // a cost of 0 only looks
	fmt.Println("settled, remaining", res.Remaining)
	// Output:
	// reserved, remaining 0
	// settled, remaining 7
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
