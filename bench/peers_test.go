package bench

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/didip/tollbooth/v7"
	echomw "github.com/labstack/echo/v4/middleware"
	sethvargo "github.com/sethvargo/go-limiter"
	sethmem "github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ulemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/go-chi/httprate"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

// limit is the one limit every peer is configured with in a benchmark: n
// requests per period, in bursts of up to n. Token buckets get rate
// n/per and burst n; window counters get n per window of length per.
type limit struct {
	n   int
	per time.Duration
}

var (
	// allowAll admits every request of a benchmark: a billion per key,
	// more than any benchmark makes. (Per hour, not per second: sethvargo
	// refills interval/n tokens per elapsed interval, one a second at
	// 10⁹/s, so it would refuse after the first second.)
	allowAll = limit{1_000_000_000, time.Hour}
	// denyAll admits one request per key per hour: the harness spends it
	// before the timer starts, and every request timed is refused.
	denyAll = limit{1, time.Hour}
	// holdKeys keeps every key's state for a day after one request, so no
	// store may forget a key while heap per key is measured.
	holdKeys = limit{10, 24 * time.Hour}
)

// maxKeys is the key cap of the stores that have one (tokenfair and
// throttled): above every benchmark's key count, so neither evicts.
const maxKeys = 1 << 21

// peer is one limiter under test, built for a limit, as a function that
// reports whether a request under key is allowed.
type peer struct {
	name string
	new  func(tb testing.TB, l limit) func(key string) bool
}

// peers are the in-process limiters, ours first. Each is set up as its
// documentation shows, with its in-memory store.
var peers = []peer{
	{"tokenfair", newTokenfair},
	{"x-time-rate", newXTimeRate},
	{"ulule", newUlule},
	{"sethvargo", newSethvargo},
	{"throttled", newThrottled},
	{"httprate", newHTTPRate},
	{"echo", newEcho},
	{"tollbooth", newTollbooth},
}

// tokenfairLimiter returns our Limiter over a memory store, through the
// public API, and the store.
func tokenfairLimiter(tb testing.TB, l limit) (*ratelimit.Limiter, *memorystore.Store) {
	s, err := memorystore.New(&memorystore.Options{MaxKeys: maxKeys})
	if err != nil {
		tb.Fatal(err)
	}
	lim, err := ratelimit.New(s, ratelimit.Policy{
		Name:  "bench",
		Limit: ratelimit.Per(int64(l.n), l.per).WithBurst(int64(l.n)),
	})
	if err != nil {
		tb.Fatal(err)
	}
	return lim, s
}

func newTokenfair(tb testing.TB, l limit) func(string) bool {
	lim, _ := tokenfairLimiter(tb, l)
	ctx := context.Background()
	return func(key string) bool {
		res, err := lim.Take(ctx, key, 1)
		if err != nil {
			tb.Fatal(err)
		}
		return res.Allowed
	}
}

// xrate is how users key golang.org/x/time/rate: one Limiter per key in a
// map under a mutex.
type xrate struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	limit rate.Limit
	burst int
}

func newXRate(l limit) *xrate {
	return &xrate{
		m:     make(map[string]*rate.Limiter),
		limit: rate.Limit(float64(l.n) / l.per.Seconds()),
		burst: l.n,
	}
}

func (x *xrate) allow(key string) bool {
	x.mu.Lock()
	lim, ok := x.m[key]
	if !ok {
		lim = rate.NewLimiter(x.limit, x.burst)
		x.m[key] = lim
	}
	x.mu.Unlock()
	return lim.Allow()
}

func newXTimeRate(_ testing.TB, l limit) func(string) bool {
	return newXRate(l).allow
}

// newXTimeRateSyncMap keys golang.org/x/time/rate the other way users do:
// one Limiter per key in a sync.Map, made on a key's first request.
func newXTimeRateSyncMap(_ testing.TB, l limit) func(string) bool {
	x := newXRate(l)
	var m sync.Map
	return func(key string) bool {
		lim, ok := m.Load(key)
		if !ok {
			lim, _ = m.LoadOrStore(key, rate.NewLimiter(x.limit, x.burst))
		}
		return lim.(*rate.Limiter).Allow()
	}
}

func newUlule(tb testing.TB, l limit) func(string) bool {
	lim := ulule.New(ulemem.NewStore(), ulule.Rate{Period: l.per, Limit: int64(l.n)})
	ctx := context.Background()
	return func(key string) bool {
		c, err := lim.Get(ctx, key)
		if err != nil {
			tb.Fatal(err)
		}
		return !c.Reached
	}
}

func sethvargoStore(tb testing.TB, l limit) sethvargo.Store {
	s, err := sethmem.New(&sethmem.Config{Tokens: uint64(l.n), Interval: l.per})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func newSethvargo(tb testing.TB, l limit) func(string) bool {
	s := sethvargoStore(tb, l)
	ctx := context.Background()
	return func(key string) bool {
		_, _, _, ok, err := s.Take(ctx, key)
		if err != nil {
			tb.Fatal(err)
		}
		return ok
	}
}

func throttledLimiter(tb testing.TB, l limit) *throttled.GCRARateLimiterCtx {
	s, err := throttledmem.NewCtx(maxKeys)
	if err != nil {
		tb.Fatal(err)
	}
	return throttledGCRA(tb, s, l)
}

func throttledGCRA(tb testing.TB, s throttled.GCRAStoreCtx, l limit) *throttled.GCRARateLimiterCtx {
	// MaxBurst counts the requests allowed beyond the first.
	lim, err := throttled.NewGCRARateLimiterCtx(s, throttled.RateQuota{
		MaxRate:  throttled.PerDuration(l.n, l.per),
		MaxBurst: l.n - 1,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return lim
}

func newThrottled(tb testing.TB, l limit) func(string) bool {
	lim := throttledLimiter(tb, l)
	ctx := context.Background()
	return func(key string) bool {
		limited, _, err := lim.RateLimitCtx(ctx, key, 1)
		if err != nil {
			tb.Fatal(err)
		}
		return !limited
	}
}

// newHTTPRate decides through OnLimit, httprate's only decision that
// counts the request: it takes a ResponseWriter and writes its X-RateLimit
// header fields there, so its decisions include that work (and a
// sync.Pool round trip for the writer's header map, since goroutines may
// not share one).
func newHTTPRate(_ testing.TB, l limit) func(string) bool {
	rl := httprate.NewRateLimiter(l.n, l.per)
	headers := sync.Pool{New: func() any { return make(http.Header, 4) }}
	r := newRequest("192.0.2.1:1234")
	return func(key string) bool {
		h := headers.Get().(http.Header)
		limited := rl.OnLimit(discardWriter{h}, r, key)
		headers.Put(h)
		return !limited
	}
}

func newEcho(_ testing.TB, l limit) func(string) bool {
	s := echomw.NewRateLimiterMemoryStoreWithConfig(echoConfig(l))
	return func(key string) bool {
		ok, _ := s.Allow(key)
		return ok
	}
}

func echoConfig(l limit) echomw.RateLimiterMemoryStoreConfig {
	return echomw.RateLimiterMemoryStoreConfig{
		Rate:  rate.Limit(float64(l.n) / l.per.Seconds()),
		Burst: l.n,
	}
}

func newTollbooth(_ testing.TB, l limit) func(string) bool {
	lmt := tollbooth.NewLimiter(float64(l.n)/l.per.Seconds(), nil)
	lmt.SetBurst(l.n)
	return func(key string) bool {
		return !lmt.LimitReached(key)
	}
}
