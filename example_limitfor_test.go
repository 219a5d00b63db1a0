package ratelimit_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

// Limits per key from a plan table the program owns and swaps whole when
// it changes: "gold" may make 100 requests a minute, every other key the
// policy's 10. When gold's plan changes to 20 a minute, its next request
// follows it, and the bucket keeps the time it needs to be full again: 10
// requests spent at 100 a minute take 6 s to come back, 2 tokens at 20 a
// minute.
func ExamplePolicy_limitFor() {
	var plans atomic.Pointer[map[string]ratelimit.Limit]
	plans.Store(&map[string]ratelimit.Limit{"gold": ratelimit.Per(100, time.Minute)})
	policy := ratelimit.Policy{Name: "per-key", Limit: ratelimit.Per(10, time.Minute),
		LimitFor: func(key string) (ratelimit.Limit, bool) {
			l, ok := (*plans.Load())[key]
			return l, ok
		}}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // a fake clock
	store, _ := memorystore.New(&memorystore.Options{Clock: func() time.Time { return now }})
	limiter, err := ratelimit.New(store, policy)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	res, _ := limiter.Take(ctx, "gold", 10)
	fmt.Println("gold:", res.Policy.Limit, "remaining", res.Remaining)
	res, _ = limiter.Take(ctx, "free", 1)
	fmt.Println("free:", res.Policy.Limit, "remaining", res.Remaining)

	plans.Store(&map[string]ratelimit.Limit{"gold": ratelimit.Per(20, time.Minute)})
	res, _ = limiter.Take(ctx, "gold", 0) // a cost of 0 only looks
	fmt.Println("gold:", res.Policy.Limit, "remaining", res.Remaining)
	// Output:
	// gold: 100/min remaining 90
	// free: 10/min remaining 9
	// gold: 20/min remaining 18
}

// A plan table indexed, as it is loaded, by the key that each API key's
// requests get, so that LimitFor finds a request's plan and neither the
// table nor the store holds an API key.
func ExampleKeyOfAPIKey() {
	byAPIKey := map[string]ratelimit.Limit{"sk-gold-7Hq2": ratelimit.Per(100, time.Minute)} // read from a file
	plans := map[string]ratelimit.Limit{}
	for apiKey, l := range byAPIKey {
		plans[ratelimit.KeyOfAPIKey("X-API-Key", apiKey)] = l
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", "sk-gold-7Hq2")
	key, _ := ratelimit.KeyByAPIKey("X-API-Key")(r)
	fmt.Println(plans[key])
	// Output:
	// 100/min
}
