package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

// An operator gives a client its quota back: Reset forgets the client's
// buckets under every per-client policy, and leaves the Global one, which
// every client shares.
func ExampleLimiter_Reset() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // a fake clock; production stores read the real one
	store, _ := memorystore.New(&memorystore.Options{Clock: func() time.Time { return now }})
	limiter, err := ratelimit.New(store,
		ratelimit.Policy{Name: "per-client", Limit: ratelimit.Per(3, time.Minute)},
		ratelimit.Policy{Name: "global", Limit: ratelimit.Per(100, time.Minute), Global: true},
	)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 4 {
		limiter.Take(ctx, "client-1", 1)
	}
	res, _ := limiter.Take(ctx, "client-1", 1)
	fmt.Println("before: allowed", res.Allowed, "refused by", res.Policy.Name) // the binding policy

	if err := limiter.Reset(ctx, "client-1"); err != nil {
		panic(err)
	}
	res, _ = limiter.Take(ctx, "client-1", 1)
	for _, r := range res.Results {
		fmt.Printf("after: %s remaining %d\n", r.Policy.Name, r.Remaining)
	}
	// Output:
	// before: allowed false refused by per-client
	// after: per-client remaining 2
	// after: global remaining 96
}
