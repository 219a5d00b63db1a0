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
	trips := new(roundTrips)
	c.AddHook(trips)
	take := peer.new(b, c, redisLimit)
	ctx := context.Background()
	take(ctx, "warm-up") // loads the script
	before := redistest.Commands(b, c)
	trips.n.Store(0)
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
	b.ReportMetric(float64(trips.n.Load())/float64(b.N), "round-trips/op")
	b.ReportMetric(float64(redistest.Commands(b, c)-before)/float64(b.N), "redis-commands/op")
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

// TestRedisPeers checks each Redis decision wrapper against a real
// redis-server: with three requests an hour, a key gets three, the fourth
// is refused, and another key is unaffected. The baseline limits nothing:
// it allows every request and counts each in its key.
func TestRedisPeers(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	ctx := context.Background()
	for _, p := range redisPeers {
		t.Run(p.name, func(t *testing.T) {
			take := p.new(t, c, small)
			a, b := p.name+":a", p.name+":b"
			if p.name == baseline {
				for i := 1; i <= 4; i++ {
					if !take(ctx, a) {
						t.Fatalf("request %d of key %s refused, want allowed", i, a)
					}
				}
				if n, err := c.Get(ctx, "incr:"+a).Int(); err != nil || n != 4 {
					t.Fatalf("GET incr:%s = %d, %v, want 4", a, n, err)
				}
				return
			}
			for i := 1; i <= 3; i++ {
				if !take(ctx, a) {
					t.Fatalf("request %d of key %s refused, want allowed", i, a)
				}
			}
			if take(ctx, a) {
				t.Fatalf("request 4 of key %s allowed, want refused", a)
			}
			if !take(ctx, b) {
				t.Fatalf("request 1 of key %s refused, want allowed", b)
			}
		})
	}
}

// deniedPeers are the rows of BenchmarkRedisDenied: the bare INCR floor,
// ours with its refusal cache and without, and redis_rate.
var deniedPeers = []redisPeer{
	redisPeers[0],
	{"tokenfair", tokenfairRedis(redisstore.Options{})},
	{"tokenfair-no-refusal-cache", tokenfairRedis(redisstore.Options{NoRefusalCache: true})},
	redisPeers[3],
}

// floods numbers the keys of BenchmarkRedisDenied's runs.
var floods atomic.Int64

// BenchmarkRedisDenied measures a denied flood: 8×GOMAXPROCS goroutines
// sending one key's requests, the key's quota (one an hour) spent before
// timing, so that every decision timed is a refusal (the incr floor allows
// and counts each). It reports the commands Redis ran per decision.
func BenchmarkRedisDenied(b *testing.B) {
	srv := redistest.Start(b)
	for _, peer := range deniedPeers {
		b.Run("parallel/"+peer.name, func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 64})
			defer c.Close()
			take := peer.new(b, c, denyAll)
			ctx := context.Background()
			key := "flood-" + strconv.FormatInt(floods.Add(1), 10) // a fresh quota for each run
			if !take(ctx, key) {
				b.Fatalf("%s refused the first request", peer.name)
			}
			before := redistest.Commands(b, c)
			var refused atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !take(ctx, key) {
						refused.Add(1)
					}
				}
			})
			b.StopTimer()
			want := int64(b.N) // every request refused
			if peer.name == baseline {
				want = 0 // the floor allows every one
			}
			if refused.Load() != want {
				b.Fatalf("%s refused %d of %d", peer.name, refused.Load(), b.N)
			}
			b.ReportMetric(float64(redistest.Commands(b, c)-before)/float64(b.N), "redis-commands/op")
		})
	}
}
