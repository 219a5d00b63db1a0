package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

// A login guard: five attempts a minute, and a client refused three times
// in quick succession is banned for ten minutes, whatever its bucket holds.
func ExamplePenalty() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // a fake clock; production stores read the real one
	store, _ := memorystore.New(&memorystore.Options{Clock: func() time.Time { return now }})
	limiter, err := ratelimit.New(store, ratelimit.Policy{Name: "login", Limit: ratelimit.Per(5, time.Minute),
		Penalty: ratelimit.Penalty{After: 3, Within: time.Minute, For: 10 * time.Minute}})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := range 8 {
		res, _ := limiter.Take(ctx, "account-42", 1)
		refusedBy := "-"
		if !res.Allowed {
			refusedBy = res.Policy.Name
			if res.Results != nil { // a ban's refusal: the ban's own result
				refusedBy = res.Results[0].Policy.Name
			}
		}
		fmt.Println(i+1, res.Allowed, refusedBy, res.RetryAfter)
	}
	now = now.Add(10 * time.Minute) // the ban is over, and the bucket is full again
	res, _ := limiter.Take(ctx, "account-42", 1)
	fmt.Println("later", res.Allowed)
	// Output:
	// 1 true - 0s
	// 2 true - 0s
	// 3 true - 0s
	// 4 true - 0s
	// 5 true - 0s
	// 6 false login 12s
	// 7 false login 12s
	// 8 false login/ban 10m0s
	// later true
}
