package ratelimit_test

import (
	"context"
	"fmt"
	"time"
	_ "time/tzdata" // Europe/Paris on a machine without a zoneinfo database

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

// A quota of 3 requests a calendar day in Paris, on top of a rate: the
// fourth request of the day is refused until midnight there, when the
// whole quota comes back at once. The next day is 23 hours long: the
// clocks go forward that night.
func ExampleDaily() {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 3, 28, 21, 30, 0, 0, paris) // a fake clock; production stores read the real one
	store, _ := memorystore.New(&memorystore.Options{Clock: func() time.Time { return now }})
	daily := ratelimit.Daily(3, paris)
	limiter, err := ratelimit.New(store,
		ratelimit.Policy{Name: "per-second", Limit: ratelimit.PerSecond(5).WithBurst(10)},
		ratelimit.Policy{Name: "daily", Limit: daily},
	)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		res, _ := limiter.Take(ctx, "client-1", 1)
		fmt.Printf("request %d: allowed=%v by %q remaining=%d retry-after=%v\n", i, res.Allowed, res.Policy.Name, res.Remaining, res.RetryAfter)
	}
	_, midnight := daily.Period(now)
	now = midnight
	res, _ := limiter.Take(ctx, "client-1", 1)
	start, end := daily.Period(now)
	fmt.Printf("at %s: allowed=%v remaining=%d, until %s (%v)\n", now.Format("Jan 2 15:04 MST"), res.Allowed, res.Remaining,
		end.Format("Jan 2 15:04 MST"), end.Sub(start))
	fmt.Println(daily)
	// Output:
	// request 1: allowed=true by "daily" remaining=2 retry-after=0s
	// request 2: allowed=true by "daily" remaining=1 retry-after=0s
	// request 3: allowed=true by "daily" remaining=0 retry-after=0s
	// request 4: allowed=false by "daily" remaining=0 retry-after=2h30m0s
	// at Mar 29 00:00 CET: allowed=true remaining=2, until Mar 30 00:00 CEST (23h0m0s)
	// 3/day (Europe/Paris)
}
