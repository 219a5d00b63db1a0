package bench

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	throttledredis "github.com/throttled/throttled/v2/store/goredisstore.v9"
	ulule "github.com/ulule/limiter/v3"
	uleredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// redisPeer is one limiter's decision function over a Redis client.
type redisPeer struct {
	name string
	new  func(tb testing.TB, c *redis.Client, l limit) func(ctx context.Context, key string) bool
}

// baseline names the Redis peer that is no limiter but the floor the
// others are measured against: it allows everything.
const baseline = "incr"

// redisLimit is the limit of the Redis benchmarks: every request allowed.
var redisLimit = limit{1_000_000, time.Second}

var redisPeers = []redisPeer{
	// incr is the baseline, not a limiter: one bare INCR of the key per
	// decision, always allowed. It is what talking to Redis costs at all
	// (one plain command, one round trip), so a limiter's ratio to it is
	// what its limiting adds.
	{baseline, func(tb testing.TB, c *redis.Client, _ limit) func(context.Context, string) bool {
		return func(ctx context.Context, key string) bool {
			if err := c.Incr(ctx, "incr:"+key).Err(); err != nil {
				tb.Error(err)
				return false
			}
			return true
		}
	}},
	// tokenfair is ours with the defaults: decisions that arrive while a
	// round trip is in flight share the next one, in one script call.
	{"tokenfair", tokenfairRedis(redisstore.Options{})},
	// tokenfair-no-batching is ours with Options.NoBatching: every
	// decision in a round trip of its own.
	{"tokenfair-no-batching", tokenfairRedis(redisstore.Options{NoBatching: true})},
	{"redis_rate", func(tb testing.TB, c *redis.Client, l limit) func(context.Context, string) bool {
		lim := redis_rate.NewLimiter(c)
		limit := redis_rate.Limit{Rate: l.n, Burst: l.n, Period: l.per}
		return func(ctx context.Context, key string) bool {
			res, err := lim.Allow(ctx, key, limit)
			if err != nil {
				tb.Error(err)
			}
			return res.Allowed > 0
		}
	}},
	// ulule's Redis store: a fixed window counter, one script per decision.
	{"ulule", func(tb testing.TB, c *redis.Client, l limit) func(context.Context, string) bool {
		s, err := uleredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: "ulule"})
		if err != nil {
			tb.Fatal(err)
		}
		lim := ulule.New(s, ulule.Rate{Period: l.per, Limit: int64(l.n)})
		return func(ctx context.Context, key string) bool {
			res, err := lim.Get(ctx, key)
			if err != nil {
				tb.Error(err)
			}
			return err == nil && !res.Reached
		}
	}},
	// throttled's go-redis v9 store: GCRA with a read (TIME and GET in one
	// pipeline) then a compare-and-swap script, retried on conflict.
	{"throttled", func(tb testing.TB, c *redis.Client, l limit) func(context.Context, string) bool {
		s, err := throttledredis.NewCtx(c, "throttled:")
		if err != nil {
			tb.Fatal(err)
		}
		lim := throttledGCRA(tb, s, l)
		return func(ctx context.Context, key string) bool {
			limited, _, err := lim.RateLimitCtx(ctx, key, 1)
			if err != nil {
				tb.Error(err)
			}
			return err == nil && !limited
		}
	}},
}

// tokenfairRedis returns our decision through the public API, a Limiter
// over a redisstore.Store made with opts and a timeout of a second.
func tokenfairRedis(opts redisstore.Options) func(testing.TB, *redis.Client, limit) func(context.Context, string) bool {
	opts.Timeout = time.Second
	return func(tb testing.TB, c *redis.Client, l limit) func(context.Context, string) bool {
		o := opts
		s, err := redisstore.New(c, &o)
		if err != nil {
			tb.Fatal(err)
		}
		lim, err := ratelimit.New(s, ratelimit.Policy{Limit: ratelimit.Per(int64(l.n), l.per).WithBurst(int64(l.n))})
		if err != nil {
			tb.Fatal(err)
		}
		return func(ctx context.Context, key string) bool {
			res, err := lim.Take(ctx, key, 1)
			if err != nil {
				tb.Error(err)
			}
			return res.Allowed
		}
	}
}

// BenchmarkRedis measures one decision against a local redis-server started
// for the benchmark, serially and from 8×GOMAXPROCS goroutines, over 1 000
// keys, all allowed, and reports the client's round trips per decision and
// the commands Redis executed per decision (INFO commandstats, script
// internals included).
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Start(b)
	key := func(n int64) string { return "key-" + strconv.FormatInt(n%1000, 10) }
	for _, mode := range []string{"serial", "parallel"} {
		for _, peer := range redisPeers {
			b.Run(mode+"/"+peer.name, func(b *testing.B) {
				runRedis(b, srv, peer, mode == "parallel", key)
			})
		}
	}
}

// runRedis measures peer's decisions on a client of its own to srv, on
// the keys key(1), key(2) and so on, serially or from 8×GOMAXPROCS
// goroutines (parallel), after a warm-up call that loads any script. Every
// decision must be allowed. It reports the client's round trips and the
// commands Redis executed per decision.
func runRedis(b *testing.B, srv *redistest.Server, peer redisPeer, parallel bool, key func(n int64) string) {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 64})
	defer c.Close()
	trips := new(redistest.RoundTrips)
	c.AddHook(trips)
	take := peer.new(b, c, redisLimit)
	ctx := context.Background()
	take(ctx, "warm-up") // loads the script
	before := redistest.Commands(b, c)
	trips.N.Store(0)
	var n, allowed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	if parallel {
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if take(ctx, key(n.Add(1))) {
					allowed.Add(1)
				}
			}
		})
	} else {
		for range b.N {
			if take(ctx, key(n.Add(1))) {
				allowed.Add(1)
			}
		}
	}
	b.StopTimer()
	if allowed.Load() != int64(b.N) {
		b.Fatalf("%s allowed %d of %d", peer.name, allowed.Load(), b.N)
	}
	b.ReportMetric(float64(trips.N.Load())/float64(b.N), "round-trips/op")
	b.ReportMetric(float64(redistest.Commands(b, c)-before)/float64(b.N), "redis-commands/op")
}
