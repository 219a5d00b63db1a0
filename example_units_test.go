package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

// The meters of a model API, each in its own unit: requests a minute,
// input tokens a minute, output tokens a day. A request reserves its
// prompt's tokens and its max_tokens of output in one decision, and
// settles the output it wrote once its stream ends; one that would pass
// the output budget spends nothing in any unit.
func ExampleLimiter_TakeUnits() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // a fake clock
	store, _ := memorystore.New(&memorystore.Options{Clock: func() time.Time { return now }})
	limiter, err := ratelimit.New(store,
		ratelimit.Policy{Name: "rpm", Limit: ratelimit.Per(60, time.Minute)},
		ratelimit.Policy{Name: "itpm", Limit: ratelimit.Per(10_000, time.Minute), Unit: "input-tokens"},
		ratelimit.Policy{Name: "otpd", Limit: ratelimit.Daily(1_000, time.UTC), Unit: "output-tokens"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	left := func() {
		res, _ := limiter.Take(ctx, "alice", 0) // a cost of 0 only looks
		for _, r := range res.Results {
			fmt.Printf(" %s %d", r.Policy.Name, r.Remaining)
		}
		fmt.Println()
	}
	took, _ := limiter.TakeUnits(ctx, "alice", map[string]int64{"input-tokens": 120, "output-tokens": 800})
	fmt.Print("reserved:")
	left()
	_ = limiter.Settle(ctx, "alice", "output-tokens", 800, 150, took) // the stream wrote 150 of 800
	fmt.Print("settled: ")
	left()
	res, _ := limiter.TakeUnits(ctx, "alice", map[string]int64{"input-tokens": 10, "output-tokens": 900})
	fmt.Println("900 more:", res.Allowed, "refused by", res.Policy.Name)
	fmt.Print("unspent: ")
	left()
	// Output:
	// reserved: rpm 59 itpm 9880 otpd 200
	// settled:  rpm 59 itpm 9880 otpd 850
	// 900 more: false refused by otpd
	// unspent:  rpm 59 itpm 9880 otpd 850
}
