package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/failover"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/redisstore"
)

// Several instances of a service share one quota through Redis; while Redis
// is unavailable each falls back to its share of the quota in memory.
func Example() {
	client := redis.NewClient(&redis.Options{
		Addr:                  "127.0.0.1:6379",
		ContextTimeoutEnabled: true, // let call deadlines cut socket reads short
		DialTimeout:           time.Second,
	})
	defer client.Close()
	shared, err := redisstore.New(client, &redisstore.Options{Prefix: "geocoding:"})
	if err != nil {
		panic(err)
	}
	local, _ := memorystore.New(nil)
	store, err := failover.New(shared, &failover.Options{
		Mode:      failover.Local,
		Local:     local,
		Instances: 3, // each instance allows a third of the quota while degraded
	})
	if err != nil {
		panic(err)
	}
	limiter, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(5).WithBurst(10)})
	if err != nil {
		panic(err)
	}
	res, err := limiter.Take(context.Background(), "client-42", 1)
	fmt.Println(res.Allowed, err)
}

// A service whose clients send many requests each can answer most of them
// without a round trip: with a lease time, each busy key's tokens are taken
// several at a time and spent locally until the lease ends. Nothing is ever
// admitted that the shared bucket would refuse; tokens idle in one
// instance's lease may be refused to another's client.
func ExampleOptions_lease() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	shared, err := redisstore.New(client, &redisstore.Options{Lease: 50 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	limiter, err := ratelimit.New(shared, ratelimit.Policy{Limit: ratelimit.PerSecond(1000).WithBurst(200)})
	if err != nil {
		panic(err)
	}
	for range 3 { // the first goes alone, the second takes a lease of 2, the third spends it
		res, err := limiter.Take(context.Background(), "client-42", 1)
		fmt.Println(res.Allowed, err)
	}
}
