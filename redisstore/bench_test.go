package redisstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

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

// BenchmarkTakeWaitReplicas: one decision against a local primary with one
// local replica, with Options.WaitReplicas 0 and 1 side by side. The WAIT
// goes in the script call's pipeline: the round trips per decision are
// the same (reported as round-trips/op, with the WAITs per decision), and
// what WaitReplicas adds is the replica's acknowledgement, within the
// primary, to each round trip.
func BenchmarkTakeWaitReplicas(b *testing.B) {
	primary, _ := startReplicated(b)
	c := redis.NewClient(&redis.Options{Addr: primary.Addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { c.Close() })
	trips := new(redistest.RoundTrips)
	c.AddHook(trips)
	admin := primary.Client()
	p := &ratelimit.Policy{Name: "bench", Limit: ratelimit.PerSecond(1e9).WithBurst(1e9)}
	for _, n := range []int{0, 1} {
		s, err := redisstore.New(c, &redisstore.Options{WaitReplicas: n, Timeout: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		// report adds the round trips and WAITs per decision since the start.
		report := func(b *testing.B, trips0, waits0 int64) {
			b.ReportMetric(float64(trips.N.Load()-trips0)/float64(b.N), "round-trips/op")
			b.ReportMetric(float64(redistest.Commands(b, admin, "wait")-waits0)/float64(b.N), "waits/op")
		}
		b.Run("WaitReplicas="+strconv.Itoa(n)+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			trips0, waits0 := trips.N.Load(), redistest.Commands(b, admin, "wait")
			for b.Loop() {
				if _, err := s.Take(context.Background(), p, "k", 1); err != nil {
					b.Fatal(err)
				}
			}
			report(b, trips0, waits0)
		})
		b.Run("WaitReplicas="+strconv.Itoa(n)+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8)
			trips0, waits0 := trips.N.Load(), redistest.Commands(b, admin, "wait")
			var k atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				key := "k" + strconv.Itoa(int(k.Add(1)%64))
				for pb.Next() {
					if _, err := s.Take(context.Background(), p, key, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
			report(b, trips0, waits0)
		})
	}
}
