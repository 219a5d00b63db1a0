package bench

import (
	"context"

	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// redisPeer is one limiter's decision function over a Redis client.
type redisPeer struct {
	name string
	new  func(b *testing.B, c *redis.Client) func(ctx context.Context, key string) bool
}

var redisPeers = []redisPeer{
	{"tokenfair", func(b *testing.B, c *redis.Client) func(context.Context, string) bool {
		s, err := redisstore.New(c, redisstore.WithTimeout(time.Second))
		if err != nil {
			b.Fatal(err)
		}
		lim, err := ratelimit.New(s, ratelimit.Policy{Limit: ratelimit.PerSecond(1_000_000).WithBurst(1_000_000)})
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, key string) bool {
			res, err := lim.Take(ctx, key, 1)
			if err != nil {
				b.Error(err)
			}
			return res.Allowed
		}
	}},
	{"redis_rate", func(b *testing.B, c *redis.Client) func(context.Context, string) bool {
		lim := redis_rate.NewLimiter(c)
		limit := redis_rate.Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}
		return func(ctx context.Context, key string) bool {
			res, err := lim.Allow(ctx, key, limit)
			if err != nil {
				b.Error(err)
			}
			return res.Allowed > 0
		}
	}},
}

// BenchmarkRedis measures one decision against a local redis-server started
// for the benchmark, serially and from parallel goroutines over 1 000 keys,
// and reports the client's round trips per decision and the commands Redis
// executed per decision (INFO commandstats, script internals included).
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Start(b)
	for _, peer := range redisPeers {
		for _, mode := range []string{"serial", "parallel"} {
			b.Run(peer.name+"/"+mode, func(b *testing.B) {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 64})
				defer c.Close()
				trips := new(roundTrips)
				c.AddHook(trips)
				take := peer.new(b, c)
				ctx := context.Background()
				take(ctx, "warm-up") // loads the script
				before := commandCalls(b, c)
				trips.n.Store(0)
				var allowed atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				if mode == "serial" {
					for i := 0; i < b.N; i++ {
						if take(ctx, "key-"+strconv.Itoa(i%1000)) {
							allowed.Add(1)
						}
					}
				} else {
					b.SetParallelism(8)
					var n atomic.Int64
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if take(ctx, "key-"+strconv.Itoa(int(n.Add(1)%1000))) {
								allowed.Add(1)
							}
						}
					})
				}
				b.StopTimer()
				if allowed.Load() == 0 {
					b.Fatal("nothing allowed")
				}
				b.ReportMetric(float64(trips.n.Load())/float64(b.N), "round-trips/op")
				b.ReportMetric(float64(commandCalls(b, c)-before-1)/float64(b.N), "redis-commands/op")
			})
		}
	}
}

// roundTrips counts the client's round trips to Redis: each command or
// pipeline sent is one.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// commandCalls returns the number of commands the server has executed,
// from INFO commandstats, not counting INFO itself.
func commandCalls(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info:") {
			continue
		}
		// cmdstat_evalsha:calls=12,usec=...
		_, rest, _ := strings.Cut(line, ":calls=")
		calls, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			b.Fatalf("INFO commandstats line %q: %v", line, err)
		}
		total += n
	}
	return total
}
