package redisstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// BenchmarkTake: one decision against a live local redis-server, through a
// *redis.Client (so with the store's dial hook), one caller at a time and
// many at once, alone and batched.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { c.Close() })
	p := &ratelimit.Policy{Name: "bench", Limit: ratelimit.PerSecond(1e9).WithBurst(1e9)}
	for _, batching := range []bool{false, true} {
		s, err := redisstore.New(c, &redisstore.Options{NoBatching: !batching})
		if err != nil {
			b.Fatal(err)
		}
		name := "alone"
		if batching {
			name = "batched"
		}
		b.Run(name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Take(context.Background(), p, "k", 1); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8)
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				key := "k" + strconv.Itoa(int(n.Add(1)%64))
				for pb.Next() {
					if _, err := s.Take(context.Background(), p, key, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
