package memorystore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

func ExampleNew() {
	store, err := memorystore.New(&memorystore.Options{MaxKeys: 100_000})
	if err != nil {
		panic(err)
	}

	limiter, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.Per(3, time.Minute)})
	if err != nil {
		panic(err)
	}
	for range 4 {
		res, _ := limiter.Take(context.Background(), "user:42", 1)
		fmt.Println(res.Allowed, res.Remaining)
	}
	fmt.Println(store.Len(), "key held")
	// Output:
	// true 2
	// true 1
	// true 0
	// false 0
	// 1 key held
}
