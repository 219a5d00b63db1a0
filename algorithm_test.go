package ratelimit_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
	"github.com/tokenfair/ratelimit/memorystore"
)

// bucket returns a TokenBucket policy of one token per interval
// nanoseconds.
func bucket(interval, burst int64) *ratelimit.Policy {
	return &ratelimit.Policy{Name: "p", Limit: ratelimit.Per(1, time.Duration(interval)).WithBurst(burst)}
}

// queue returns a LeakyShape policy of one request per interval
// nanoseconds.
func queue(interval, burst, immediate int64, maxDelay time.Duration) *ratelimit.Policy {
	return &ratelimit.Policy{
		Name:      "p",
		Limit:     ratelimit.Per(1, time.Duration(interval)).WithBurst(burst),
		Algorithm: ratelimit.LeakyShape,
		Immediate: immediate,
		MaxDelay:  maxDelay,
	}
}

// bound returns the longest wait the LeakyShape policy p admits: the
// queue's room, burst × interval, or less when MaxDelay is set.
func bound(p *ratelimit.Policy) int64 {
	iv := int64(p.Limit.Interval())
	b := p.Limit.Burst() * iv
	if p.MaxDelay > 0 {
		b = min(b, int64(p.MaxDelay)+p.Immediate*iv)
	}
	return b
}

// decision is one result of Decide in nanoseconds, with the next state.
type decision struct {
	Allowed    bool
	State      int64 // the state to store; the input state when refused
	Remaining  int64
	RetryAfter int64
	ResetAfter int64
	Delay      int64
}

func decide(p *ratelimit.Policy, state, now, cost int64) decision {
	res, next := p.Decide(state, now, cost)
	return decision{res.Allowed, next, res.Remaining, int64(res.RetryAfter), int64(res.ResetAfter), int64(res.Delay)}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// ratBucket is an independent model of a token bucket in exact rational
// arithmetic: tokens refill continuously at one per interval up to burst.
type ratBucket struct {
	interval, burst int64
	tokens          *big.Rat
	last            int64
}

func newRatBucket(interval, burst, now int64) *ratBucket {
	return &ratBucket{interval: interval, burst: burst, tokens: big.NewRat(burst, 1), last: now}
}

func (b *ratBucket) take(now, cost int64) (allowed bool, remaining, retryAfter, resetAfter int64) {
	if now > b.last {
		b.tokens.Add(b.tokens, big.NewRat(now-b.last, b.interval))
		if b.tokens.Cmp(big.NewRat(b.burst, 1)) > 0 {
			b.tokens.SetInt64(b.burst)
		}
		b.last = now
	}
	c := big.NewRat(cost, 1)
	if cost <= b.burst && b.tokens.Cmp(c) >= 0 {
		allowed = true
		b.tokens.Sub(b.tokens, c)
	} else if cost <= b.burst {
		retryAfter = ratNanos(new(big.Rat).Sub(c, b.tokens), b.interval)
	}
	remaining = new(big.Int).Quo(b.tokens.Num(), b.tokens.Denom()).Int64()
	resetAfter = ratNanos(new(big.Rat).Sub(big.NewRat(b.burst, 1), b.tokens), b.interval)
	return
}

// ratNanos converts a number of tokens into the time they take to earn; it
// is a whole number of nanoseconds because the model only ever adds whole
// nanoseconds' worth of tokens.
func ratNanos(tokens *big.Rat, interval int64) int64 {
	d := new(big.Rat).Mul(tokens, big.NewRat(interval, 1))
	if !d.IsInt() {
		panic("non-integer duration " + d.String())
	}
	return d.Num().Int64()
}

// TestTokenBucketMatchesExactArithmetic replays random traces whose arrival
// times land on and around refill boundaries (multiples of interval/4) and
// compares every field with the rational model.
func TestTokenBucketMatchesExactArithmetic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	differences, decisions := 0, 0
	for trace := range 2000 {
		interval := 4 * (1 + rng.Int64N(1e9/4)) // divisible by 4, up to 1 s
		burst := 1 + rng.Int64N(12)
		p := bucket(interval, burst)
		now := rng.Int64N(1e18)
		model := newRatBucket(interval, burst, now)
		var state int64
		for range 60 {
			// Often no time at all, else to a quarter-interval boundary,
			// sometimes one nanosecond either side of it; never backwards.
			prev := now
			now += rng.Int64N(3) * interval / 4 * rng.Int64N(3)
			if rng.IntN(8) == 0 {
				now = max(now+rng.Int64N(3)-1, prev)
			}
			cost := rng.Int64N(burst + 2)
			d := decide(p, state, now, cost)
			allowed, remaining, retry, reset := model.take(now, cost)
			decisions++
			got := [4]int64{b2i(d.Allowed), d.Remaining, d.RetryAfter, d.ResetAfter}
			want := [4]int64{b2i(allowed), remaining, retry, reset}
			if got != want {
				differences++
				if differences < 5 {
					t.Errorf("trace %d: %v: Decide(%d, %d, %d) = %v, model says %v", trace, p.Limit, state, now, cost, got, want)
				}
			}
			state = d.State
		}
	}
	assert.Zero(t, differences, "differences in %d decisions", decisions)
}

// TestTokenBucketMatchesXTimeRate compares decisions with
// golang.org/x/time/rate's AllowN on random traces with arbitrary
// nanosecond arrival times.
func TestTokenBucketMatchesXTimeRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	differences, decisions := 0, 0
	for trace := range 1000 {
		interval := 1 + rng.Int64N(int64(time.Second))
		burst := 1 + rng.Int64N(20)
		p := bucket(interval, burst)
		lim := rate.NewLimiter(rate.Every(time.Duration(interval)), int(burst))
		var state, now int64
		for range 200 {
			now += rng.Int64N(2 * interval)
			cost := rng.Int64N(burst + 2)
			got := decide(p, state, epoch.UnixNano()+now, cost)
			want := lim.AllowN(epoch.Add(time.Duration(now)), int(cost))
			decisions++
			if got.Allowed != want {
				differences++
				if differences < 5 {
					t.Errorf("trace %d: interval %d burst %d: at %d cost %d: allowed %v, x/time/rate %v", trace, interval, burst, now, cost, got.Allowed, want)
				}
			}
			state = got.State
		}
	}
	assert.Zero(t, differences, "differences in %d decisions", decisions)
}

// TestGCRAVector is the table shared by throttled and redis-cell (standards
// V7): one token per second, limit 5.
func TestGCRAVector(t *testing.T) {
	const s = int64(time.Second)
	epoch := int64(1_700_000_000) * s
	p := bucket(s, 5)
	rows := []struct {
		at, cost          int64 // at in tenths of a second
		allowed           bool
		remaining         int64
		resetAfter, retry int64 // tenths of a second
	}{
		{0, 6, false, 5, 0, 0},
		{0, 1, true, 4, 10, 0},
		{0, 1, true, 3, 20, 0},
		{0, 1, true, 2, 30, 0},
		{0, 1, true, 1, 40, 0},
		{0, 1, true, 0, 50, 0},
		{0, 1, false, 0, 50, 10},
		{30, 1, true, 2, 30, 0},
		{31, 1, true, 1, 39, 0},
		{40, 1, true, 1, 40, 0},
		{80, 1, true, 4, 10, 0},
		{95, 1, true, 4, 10, 0},
		{95, 0, true, 4, 10, 0},
		{95, 2, true, 2, 30, 0},
		{95, 5, false, 2, 30, 30},
		{150, 6, false, 5, 0, 0},
	}
	var state int64
	for i, r := range rows {
		now := epoch + r.at*s/10
		d := decide(p, state, now, r.cost)
		got := [4]int64{b2i(d.Allowed), d.Remaining, d.ResetAfter, d.RetryAfter}
		want := [4]int64{b2i(r.allowed), r.remaining, r.resetAfter * s / 10, r.retry * s / 10}
		require.Equal(t, want, got, "row %d: Decide(%d, t=%.1fs, cost %d)", i, state, float64(r.at)/10, r.cost)
		state = d.State
	}
}

func TestTokenBucketInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		interval := 1 + rng.Int64N(int64(time.Second))
		burst := 1 + rng.Int64N(50)
		p := bucket(interval, burst)
		var state, now, admitted int64
		start := rng.Int64N(1e18)
		for range 500 {
			now += rng.Int64N(interval)
			cost := rng.Int64N(burst + 1)
			d := decide(p, state, start+now, cost)
			require.GreaterOrEqual(t, d.Remaining, int64(0))
			require.LessOrEqual(t, d.Remaining, burst)
			require.GreaterOrEqual(t, d.RetryAfter, int64(0))
			require.GreaterOrEqual(t, d.ResetAfter, int64(0))
			if d.Allowed {
				admitted += cost
			} else if cost <= burst {
				require.Positive(t, d.RetryAfter)
				// Not a nanosecond too early: one nanosecond before the
				// reported time the request is still refused.
				require.False(t, decide(p, d.State, start+now+d.RetryAfter-1, cost).Allowed)
				require.True(t, decide(p, d.State, start+now+d.RetryAfter, cost).Allowed)
			}
			state = d.State
			// Never more than burst + rate × elapsed.
			require.LessOrEqual(t, admitted, burst+now/interval)
		}
	}
}

// FuzzTokenBucket checks the invariants of the algorithm on arbitrary
// traces: never more admitted than burst + rate × elapsed, remaining never
// negative, retry-after never negative and never a nanosecond too early.
func FuzzTokenBucket(f *testing.F) {
	f.Add(int64(200_000_000), int64(10), []byte{1, 1, 1, 0, 5, 200, 3})
	f.Add(int64(1), int64(1), []byte{0, 0, 0, 0})
	f.Add(int64(86_400_000_000_000), int64(10000), []byte{255, 9, 17})
	f.Fuzz(func(t *testing.T, interval, burst int64, trace []byte) {
		if interval < 1 || burst < 1 || burst > int64(100*365*24*time.Hour)/interval {
			t.Skip()
		}
		p := bucket(interval, burst)
		var state, elapsed, admitted int64
		start := int64(1_700_000_000) * int64(time.Second)
		for i := 0; i+1 < len(trace); i += 2 {
			elapsed += int64(trace[i]) * (interval/16 + 1)
			cost := int64(trace[i+1]) % (burst + 2)
			now := start + elapsed
			d := decide(p, state, now, cost)
			if d.Remaining < 0 || d.Remaining > burst || d.RetryAfter < 0 || d.ResetAfter < 0 {
				t.Fatalf("%v: Decide(%d, %d, %d) = %+v", p.Limit, state, now, cost, d)
			}
			if d.Allowed {
				admitted += cost
			} else if cost <= burst {
				if decide(p, state, now+d.RetryAfter-1, cost).Allowed {
					t.Fatalf("retry-after %d is too late: allowed a nanosecond earlier", d.RetryAfter)
				}
				if !decide(p, state, now+d.RetryAfter, cost).Allowed {
					t.Fatalf("retry-after %d is too early", d.RetryAfter)
				}
			}
			if max := burst + elapsed/interval; admitted > max {
				t.Fatalf("admitted %d > burst + rate × elapsed = %d", admitted, max)
			}
			state = d.State
		}
	})
}

// FuzzShape checks that a shaping queue admits at most one request per
// interval beyond its room, never waits past its bound, and that refusals
// name the exact time they would pass.
func FuzzShape(f *testing.F) {
	f.Add(int64(200_000_000), int64(10), int64(0), []byte{0, 1, 0, 1, 3, 1})
	f.Add(int64(1000), int64(3), int64(2), []byte{1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, interval, burst, immediate int64, trace []byte) {
		if interval < 1 || burst < 1 || burst > 1<<20 || interval > int64(time.Hour) || immediate < 0 || immediate > burst {
			t.Skip()
		}
		p := queue(interval, burst, immediate, 0)
		bound := burst * interval
		var state, elapsed, admitted int64
		for i := 0; i+1 < len(trace); i += 2 {
			elapsed += int64(trace[i]) * (interval/8 + 1)
			cost := int64(trace[i+1]) % (burst + 2)
			d := decide(p, state, elapsed, cost)
			if d.Delay < 0 || d.Delay > bound || d.Remaining < 0 || d.RetryAfter < 0 {
				t.Fatalf("Decide(%d, %d, cost %d) = %+v", state, elapsed, cost, d)
			}
			if d.Allowed {
				admitted += cost
			} else if cost > 0 && cost <= burst {
				if decide(p, state, elapsed+d.RetryAfter-1, cost).Allowed ||
					!decide(p, state, elapsed+d.RetryAfter, cost).Allowed {
					t.Fatalf("retry-after %d is not exact", d.RetryAfter)
				}
			}
			// Admitted work leaves at one unit per interval, behind a queue
			// of at most bound: it never exceeds burst + 1 + elapsed/interval + costs in flight.
			if max := 2*burst + 1 + elapsed/interval; admitted > max {
				t.Fatalf("admitted %d > %d", admitted, max)
			}
			state = d.State
		}
	})
}

func BenchmarkDecide(b *testing.B) {
	for _, alg := range []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.LeakyShape} {
		name, _ := alg.MarshalText()
		b.Run(string(name), func(b *testing.B) {
			benchDecide(b, &ratelimit.Policy{Name: "bench", Limit: ratelimit.PerSecond(1_000_000).WithBurst(1_000_000_000), Algorithm: alg}, 1e18)
		})
	}
	for _, zone := range []string{"UTC", "Europe/Paris"} {
		b.Run("daily-"+zone, func(b *testing.B) {
			loc, err := time.LoadLocation(zone)
			require.NoError(b, err)
			// as a Limiter hands it to its store: checked, its period kept
			lim, err := ratelimit.New(benchStore(b), ratelimit.Policy{Name: "bench", Limit: ratelimit.Daily(1_000_000_000_000, loc)})
			require.NoError(b, err)
			benchDecide(b, &lim.Policies()[0], time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC).UnixNano()) // a change of clock in Paris
		})
	}
}

// benchStore returns a memory store for a benchmark's Limiter.
func benchStore(b *testing.B) *memorystore.Store {
	s, err := memorystore.New(nil)
	require.NoError(b, err)
	return s
}

// benchDecide measures p.Decide of one request every 500 ns from now on.
func benchDecide(b *testing.B, p *ratelimit.Policy, now int64) {
	var res ratelimit.Result
	b.ReportAllocs()
	state, allowed := int64(0), 0
	for b.Loop() {
		res, state = p.Decide(state, now, 1)
		if res.Allowed {
			allowed++
		}
		now += 500
	}
	if allowed == 0 {
		b.Fatal("nothing allowed")
	}
}

const ms = int64(time.Millisecond)

// TestShapeSchedule is the seed's example: 5/s, burst 10, twelve requests at
// once: one runs now, ten wait 0.2 s … 2.0 s, the twelfth is refused.
func TestShapeSchedule(t *testing.T) {
	const iv, burst = 200 * ms, 10
	p := queue(iv, burst, 0, 0)
	now := int64(1_700_000_000) * int64(time.Second)
	var state int64
	for i := range int64(12) {
		d := decide(p, state, now, 1)
		if i < 11 {
			require.True(t, d.Allowed, "request %d", i+1)
			assert.Equal(t, i*iv, d.Delay, "request %d waits", i+1)
			assert.Equal(t, (i+1)*iv, d.ResetAfter, "request %d: queue empties", i+1)
			assert.Equal(t, min(11-(i+1), 10), d.Remaining, "request %d: requests still admitted", i+1)
		} else {
			require.False(t, d.Allowed, "request 12")
			assert.Equal(t, iv, d.RetryAfter)
			assert.Equal(t, int64(0), d.Delay)
			assert.Equal(t, int64(0), d.Remaining)
			assert.Equal(t, state, d.State, "a refusal changes nothing")
		}
		state = d.State
	}
}

func TestShapeEdgeAndCosts(t *testing.T) {
	const iv, burst = 200 * ms, 10
	const tau = burst * iv
	type step struct {
		advance, cost int64
		allowed       bool
		delay, retry  int64
	}
	run := func(name string, p *ratelimit.Policy, steps []step) {
		t.Helper()
		var state, now int64 = 0, 1e18
		for i, s := range steps {
			now += s.advance
			d := decide(p, state, now, s.cost)
			got := [3]int64{b2i(d.Allowed), d.Delay, d.RetryAfter}
			want := [3]int64{b2i(s.allowed), s.delay, s.retry}
			assert.Equal(t, want, got, "%s step %d: Decide(cost %d after %d)", name, i, s.cost, s.advance)
			state = d.State
		}
	}
	run("edge", queue(iv, burst, 0, 0), []step{
		{cost: 10, allowed: true},
		{cost: 1, allowed: true, delay: tau}, // a wait of exactly the queue's room
		{cost: 1, retry: iv},                 // 2.2 s: refused
		{advance: iv - 1, cost: 1, retry: 1}, // 2.0 s + 1 ns: refused
		{advance: 1, cost: 1, allowed: true, delay: tau},
	})
	run("costs", queue(iv, burst, 0, 0), []step{
		{cost: 3, allowed: true},
		{cost: 2, allowed: true, delay: 3 * iv},
		{cost: 0, allowed: true},
		{cost: 6, allowed: true, delay: 5 * iv},
		{cost: 11, allowed: false},                 // above the burst: never, no retry
		{advance: 11 * iv, cost: 1, allowed: true}, // idle long enough: the queue is empty
		{advance: 10 * iv, cost: 1, allowed: true}, // and again: no wait
	})
	// nginx: rate=5r/s burst=12 delay=8, 15 at once: 9 pass at once, 4 are
	// delayed 200, 400, 600, 800 ms, 2 are refused.
	var steps []step
	for i := range int64(13) {
		steps = append(steps, step{cost: 1, allowed: true, delay: max(i-8, 0) * iv})
	}
	steps = append(steps, step{cost: 1, retry: iv}, step{cost: 1, retry: iv})
	func() {
		p := queue(iv, 12, 8, 0)
		var state, now int64 = 0, 1e18
		for i, s := range steps {
			d := decide(p, state, now, s.cost)
			assert.Equal(t, [3]int64{b2i(s.allowed), s.delay, s.retry}, [3]int64{b2i(d.Allowed), d.Delay, d.RetryAfter}, "nginx delay=8, request %d", i+1)
			state = d.State
		}
	}()
	// A maximum wait of 500 ms below the 2 s room: waits 0, 200, 400 pass.
	run("max delay", queue(iv, burst, 0, 500*time.Millisecond), []step{
		{cost: 1, allowed: true},
		{cost: 1, allowed: true, delay: iv},
		{cost: 1, allowed: true, delay: 2 * iv},
		{cost: 1, retry: 100 * ms},
	})
	// With Immediate 2 the first 400 ms of every wait are forgiven and
	// MaxDelay bounds the rest: waits up to 900 ms pass.
	run("max delay after immediate", queue(iv, burst, 2, 500*time.Millisecond), []step{
		{cost: 1, allowed: true},
		{cost: 1, allowed: true},
		{cost: 1, allowed: true},
		{cost: 1, allowed: true, delay: iv},
		{cost: 1, allowed: true, delay: 2 * iv},
		{cost: 1, retry: 100 * ms},
	})
}

// waterMeter is an independent model of the leaky bucket as a meter, in
// exact rational arithmetic: the level drops by one unit per interval, a
// request pours in its cost, and a request that would overflow is refused.
type waterMeter struct {
	interval, burst int64
	level           *big.Rat
	last            int64
}

func (m *waterMeter) pour(now, cost int64) bool {
	if now > m.last {
		m.level.Sub(m.level, big.NewRat(now-m.last, m.interval))
		if m.level.Sign() < 0 {
			m.level.SetInt64(0)
		}
		m.last = now
	}
	next := new(big.Rat).Add(m.level, big.NewRat(cost, 1))
	if next.Cmp(big.NewRat(m.burst, 1)) > 0 {
		return false
	}
	m.level = next
	return true
}

// TestLeakyPoliceIsTheTokenBucket replays random traces through the
// LeakyPolice policy and an exact water-level meter: the decisions agree,
// and so do the token bucket's, field for field and state for state.
func TestLeakyPoliceIsTheTokenBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	differences, decisions := 0, 0
	for range 1000 {
		iv := 4 * (1 + rng.Int64N(1e8))
		burst := 1 + rng.Int64N(15)
		tb := bucket(iv, burst)
		police := *tb
		police.Algorithm = ratelimit.LeakyPolice
		now := rng.Int64N(1e18)
		meter := &waterMeter{interval: iv, burst: burst, level: new(big.Rat), last: now}
		var ps, bs int64
		for range 100 {
			now += rng.Int64N(3) * iv / 4 * rng.Int64N(3)
			cost := rng.Int64N(burst + 2)
			pr, pnext := police.Decide(ps, now, cost)
			br, bnext := tb.Decide(bs, now, cost)
			want := meter.pour(now, cost)
			decisions++
			if pr.Policy != &police || br.Policy != tb {
				t.Fatalf("Decide's Result.Policy is not the deciding policy")
			}
			pr.Policy, br.Policy = nil, nil
			if pr.Allowed != want || br.Allowed != want || !reflect.DeepEqual(pr, br) || pnext != bnext {
				differences++
			}
			ps, bs = pnext, bnext
		}
	}
	assert.Zero(t, differences, "differences in %d decisions", decisions)
}

func TestShapeInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for range 300 {
		iv := 1 + rng.Int64N(int64(time.Second))
		burst := 1 + rng.Int64N(30)
		immediate := rng.Int64N(burst + 1)
		p := queue(iv, burst, immediate, 0)
		if rng.IntN(2) == 0 {
			p.MaxDelay = time.Duration(rng.Int64N(burst * iv)) // 0: no maximum
		}
		bound := bound(p)
		var state, now int64
		start := rng.Int64N(1e18)
		for range 300 {
			now += rng.Int64N(2 * iv)
			cost := rng.Int64N(burst + 1)
			d := decide(p, state, start+now, cost)
			require.GreaterOrEqual(t, d.Remaining, int64(0))
			require.LessOrEqual(t, d.Remaining, burst)
			require.GreaterOrEqual(t, d.Delay, int64(0))
			require.LessOrEqual(t, d.Delay, bound)
			require.GreaterOrEqual(t, d.RetryAfter, int64(0))
			if !d.Allowed && cost > 0 && cost <= burst {
				require.False(t, decide(p, state, start+now+d.RetryAfter-1, cost).Allowed, "one nanosecond early")
				require.True(t, decide(p, state, start+now+d.RetryAfter, cost).Allowed, "on time")
			}
			if d.Allowed && d.Remaining > 0 {
				require.True(t, decide(p, d.State, start+now, 1).Allowed, "Remaining > 0 promises one more")
			}
			state = d.State
		}
	}
}

// TestDecideGiveBack: a negative cost is allowed and moves the state back
// by −cost intervals, never to before now, for every algorithm.
// TestRefund: a refund credits what the take still costs the bucket: at
// most its cost, no more than end − now, never before now.
func TestRefund(t *testing.T) {
	const now = int64(1e18)
	for _, p := range []*ratelimit.Policy{bucket(100, 10), queue(100, 10, 0, 0)} {
		for _, tc := range []struct{ state, cost, end, next int64 }{
			{now + 600, 2, now + 600, now + 400},  // all of it is owed
			{now + 600, 2, now + 150, now + 450},  // 150 ns of it is still owed
			{now + 600, 10, now + 600, now},       // never before now
			{now + 600, 2, now, now + 600},        // earned back: nothing
			{now + 600, 2, now - 300, now + 600},  // the bucket was full since
			{now - 5, 1, now + 100, now - 5},      // already full: nothing to give back
			{now + 600, 0, now + 600, now + 600},  // a cost of 0
			{now + 600, -3, now + 600, now + 600}, // a negative cost is no refund
		} {
			assert.Equal(t, tc.next, p.Refund(tc.state, now, tc.cost, tc.end), "%v: Refund(now%+d, now, %d, now%+d)", p.Algorithm, tc.state-now, tc.cost, tc.end-now)
		}
	}
	ban := &ratelimit.Policy{Name: "b", Limit: ratelimit.PerSecond(1), Algorithm: algo.Ban}
	assert.Equal(t, now+600, ban.Refund(now+600, now, 1, now+600), "a ban never moves back")
}

// TestDecideNegativeCost: a negative cost is a look, not a give-back.
func TestDecideNegativeCost(t *testing.T) {
	const now = int64(1e18)
	p := bucket(100, 10)
	res, next := p.Decide(now+600, now, -2)
	assert.Equal(t, now+600, next)
	assert.True(t, res.Allowed)
	assert.EqualValues(t, 4, res.Remaining)
}

// at returns the Unix nanoseconds of s, in RFC 3339.
func at(t *testing.T, s string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return v.UnixNano()
}

// dailyPolicy returns a policy of a quota of n per day in the zone named zone.
func dailyPolicy(t *testing.T, n int64, zone string) *ratelimit.Policy {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	require.NoError(t, err)
	return &ratelimit.Policy{Name: "q", Limit: ratelimit.Daily(n, loc)}
}

// quotaStep is a decision of a calendar quota at at (RFC 3339) and what it
// must be: the state it must leave is end + spent, end being the RFC 3339
// end of the period of the decision, or unchanged.
type quotaStep struct {
	at        string
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration
	reset     time.Duration
	end       string // "": the state does not change
	spent     int64
}

// runQuota decides steps in turn, from state, and returns the last state.
func runQuota(t *testing.T, p *ratelimit.Policy, state int64, steps []quotaStep) int64 {
	t.Helper()
	for i, s := range steps {
		res, next := p.Decide(state, at(t, s.at), s.cost)
		want := state
		if s.end != "" {
			want = at(t, s.end) + s.spent
		}
		got := decision{res.Allowed, next, res.Remaining, int64(res.RetryAfter), int64(res.ResetAfter), int64(res.Delay)}
		assert.Equal(t, decision{s.allowed, want, s.remaining, int64(s.retry), int64(s.reset), 0}, got,
			"step %d: %v: Decide(%d, %s, %d)", i, p.Limit, state, s.at, s.cost)
		assert.Equal(t, next, res.Until, "step %d: Until is the new state", i)
		state = next
	}
	return state
}

// A calendar quota spends its n tokens in the period and gets them all back
// at its end, not a nanosecond before: ResetAfter is always the time to the
// end, RetryAfter that too for a refusal that the reset ends, and a cost
// above the quota is refused with no RetryAfter.
func TestQuotaDecide(t *testing.T) {
	const E, next = "2026-03-11T00:00:00Z", "2026-03-12T00:00:00Z"
	runQuota(t, dailyPolicy(t, 5, "UTC"), 0, []quotaStep{
		{at: "2026-03-10T10:00:00Z", cost: 0, allowed: true, remaining: 5, reset: 14 * time.Hour}, // a look keeps a new key new
		{at: "2026-03-10T10:00:00Z", cost: 2, allowed: true, remaining: 3, reset: 14 * time.Hour, end: E, spent: 2},
		{at: "2026-03-10T11:00:00Z", cost: 3, allowed: true, remaining: 0, reset: 13 * time.Hour, end: E, spent: 5},
		{at: "2026-03-10T11:00:00Z", cost: 0, allowed: true, remaining: 0, reset: 13 * time.Hour},
		{at: "2026-03-10T12:00:00Z", cost: 1, remaining: 0, retry: 12 * time.Hour, reset: 12 * time.Hour},
		{at: "2026-03-10T23:59:59.999999999Z", cost: 1, retry: 1, reset: 1},
		{at: E, cost: 1, allowed: true, remaining: 4, reset: 24 * time.Hour, end: next, spent: 1},
		{at: E, cost: 6, remaining: 4, reset: 24 * time.Hour}, // above the quota: never
		{at: "2026-03-11T01:00:00Z", cost: 5, remaining: 4, retry: 23 * time.Hour, reset: 23 * time.Hour},
		{at: "2026-03-11T01:00:00Z", cost: 4, allowed: true, remaining: 0, reset: 23 * time.Hour, end: next, spent: 5},
	})
	// The month of February 2026, the 25-hour day of Europe/Paris, and a
	// midnight in a gap west of Greenwich (Havana's 8 March begins at
	// 01:00 CDT): ResetAfter is the time to the real end.
	runQuota(t, &ratelimit.Policy{Name: "m", Limit: ratelimit.Monthly(3, time.UTC)}, 0, []quotaStep{
		{at: "2026-02-27T00:00:00Z", cost: 3, allowed: true, reset: 2 * 24 * time.Hour, end: "2026-03-01T00:00:00Z", spent: 3},
		{at: "2026-02-28T23:00:00Z", cost: 1, retry: time.Hour, reset: time.Hour},
		{at: "2026-03-01T00:00:00Z", cost: 3, allowed: true, reset: 31 * 24 * time.Hour, end: "2026-04-01T00:00:00Z", spent: 3},
	})
	runQuota(t, dailyPolicy(t, 2, "Europe/Paris"), 0, []quotaStep{
		{at: "2026-10-25T00:00:00+02:00", cost: 2, allowed: true, reset: 25 * time.Hour, end: "2026-10-26T00:00:00+01:00", spent: 2},
		{at: "2026-10-25T02:30:00+01:00", cost: 1, retry: 21*time.Hour + 30*time.Minute, reset: 21*time.Hour + 30*time.Minute},
	})
	runQuota(t, dailyPolicy(t, 2, "America/Havana"), 0, []quotaStep{
		{at: "2026-03-07T23:30:00-05:00", cost: 2, allowed: true, reset: 30 * time.Minute, end: "2026-03-08T01:00:00-04:00", spent: 2},
		{at: "2026-03-07T23:59:59.999999999-05:00", cost: 1, retry: 1, reset: 1},
		{at: "2026-03-08T01:00:00-04:00", cost: 1, allowed: true, remaining: 1, reset: 23 * time.Hour, end: "2026-03-09T00:00:00-04:00", spent: 1},
	})
}

// A state kept in an earlier period counts as a full quota; one from a
// later period (the clock went back across a reset) counts as a quota and
// more spent: every cost is refused until the reset, after which that
// period's spending counts.
func TestQuotaDecideOtherPeriods(t *testing.T) {
	p := dailyPolicy(t, 5, "UTC")
	runQuota(t, p, at(t, "2026-03-10T00:00:00Z")+5, []quotaStep{
		{at: "2026-03-10T10:00:00Z", cost: 5, allowed: true, reset: 14 * time.Hour, end: "2026-03-11T00:00:00Z", spent: 5},
	})
	runQuota(t, p, at(t, "2026-01-01T00:00:00Z")+3, []quotaStep{
		{at: "2026-03-10T10:00:00Z", cost: 0, allowed: true, remaining: 5, reset: 14 * time.Hour},
	})
	tomorrow := at(t, "2026-03-12T00:00:00Z") + 3 // 3 spent on 11 March
	runQuota(t, p, tomorrow, []quotaStep{
		{at: "2026-03-10T10:00:00Z", cost: 0, allowed: true, remaining: 0, reset: 14 * time.Hour},
		{at: "2026-03-10T10:00:00Z", cost: 1, retry: 14 * time.Hour, reset: 14 * time.Hour},
		{at: "2026-03-10T23:59:59.999999999Z", cost: 1, retry: 1, reset: 1},
		{at: "2026-03-11T00:00:00Z", cost: 3, retry: 24 * time.Hour, reset: 24 * time.Hour, remaining: 2},
		{at: "2026-03-11T00:00:00Z", cost: 2, allowed: true, reset: 24 * time.Hour, end: "2026-03-12T00:00:00Z", spent: 5},
	})
}

// Refund of a quota gives back, within the period, at most what the take
// still costs (end is its Until), never below none spent; after the reset
// it gives back nothing, the quota being full again.
func TestQuotaRefund(t *testing.T) {
	p := dailyPolicy(t, 10, "UTC")
	E := at(t, "2026-03-11T00:00:00Z")
	for _, tc := range []struct {
		state     int64
		now       string
		cost, end int64
		next      int64
	}{
		{E + 6, "2026-03-10T10:00:00Z", 2, E + 6, E + 4},
		{E + 6, "2026-03-10T23:59:59.999999999Z", 2, E + 6, E + 4}, // the last instant
		{E + 6, "2026-03-10T10:00:00Z", 10, E + 6, E},              // never below none spent
		{E + 6, "2026-03-10T10:00:00Z", 3, E + 2, E + 4},           // a take of which 2 are still owed
		{E + 6, "2026-03-10T10:00:00Z", 0, E + 6, E + 6},
		{E + 6, "2026-03-11T00:00:00Z", 2, E + 6, E + 6},                                             // the reset: nothing back
		{E + 24*int64(time.Hour) + 3, "2026-03-11T10:00:00Z", 2, E + 6, E + 24*int64(time.Hour) + 3}, // nor from the next period's spending
	} {
		assert.Equal(t, tc.next-E, p.Refund(tc.state, at(t, tc.now), tc.cost, tc.end)-E, "Refund(E%+d, %s, %d, E%+d) - E", tc.state-E, tc.now, tc.cost, tc.end-E)
	}
}

// TestQuotaInvariants replays random traces through 2026 against calendar
// quotas in zones with and without daylight saving: within each period
// (Limit.Period) at most n tokens are admitted and Remaining is n minus
// them; ResetAfter is the time to the period's end; a refusal's RetryAfter
// is exact to the nanosecond.
func TestQuotaInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var limits []ratelimit.Limit
	for _, zone := range []string{"UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata", "America/Havana", "Australia/Lord_Howe"} {
		loc, err := time.LoadLocation(zone)
		require.NoError(t, err)
		limits = append(limits, ratelimit.Daily(1+rng.Int64N(20), loc), ratelimit.Monthly(1+rng.Int64N(200), loc))
	}
	start := at(t, "2026-01-01T00:00:00Z")
	for _, l := range limits {
		p := &ratelimit.Policy{Name: "q", Limit: l}
		n := l.Burst()
		var state, spent int64
		var period time.Time // the start of the period of the last decision
		now := start
		for range 3000 {
			now += rng.Int64N(int64(6 * time.Hour)) // about a year
			if rng.IntN(4) == 0 {
				now += rng.Int64N(3) - 1
			}
			from, to := l.Period(time.Unix(0, now))
			if !from.Equal(period) {
				period, spent = from, 0
			}
			cost := rng.Int64N(n + 2)
			res, next := p.Decide(state, now, cost)
			require.Equal(t, to.UnixNano()-now, int64(res.ResetAfter), "%v at %v: ResetAfter", l, time.Unix(0, now))
			if res.Allowed {
				spent += cost
			}
			require.LessOrEqual(t, spent, n, "%v: admitted in the period of %v", l, period)
			require.Equal(t, n-spent, res.Remaining, "%v at %v: Remaining", l, time.Unix(0, now))
			if !res.Allowed && cost <= n {
				require.Equal(t, res.ResetAfter, res.RetryAfter, "%v: a refusal waits for the reset", l)
				retry := now + int64(res.RetryAfter)
				late, _ := p.Decide(state, retry-1, cost)
				onTime, _ := p.Decide(state, retry, cost)
				require.False(t, late.Allowed, "%v: allowed a nanosecond before RetryAfter", l)
				require.True(t, onTime.Allowed, "%v: refused at RetryAfter", l)
			} else {
				require.Zero(t, res.RetryAfter)
			}
			state = next
		}
	}
}

// A token bucket's state however far ahead of now (a debt, a limit cut, a
// clock that went back) counts as it is, LimitFor or not: a refusal keeps
// it and gives the exact wait, so that nothing spent is forgiven and a
// clock that went back grants nothing once it is right again.
func TestTokenBucketStateFarAhead(t *testing.T) {
	const now = int64(1e18)
	plain := bucket(100, 10) // τ = 1000
	keyed := bucket(100, 10)
	keyed.LimitFor = func(string) (ratelimit.Limit, bool) { return ratelimit.Limit{}, false }
	for _, p := range []*ratelimit.Policy{plain, keyed} {
		d := decide(p, now+5000, now, 1)
		assert.Equal(t, decision{State: now + 5000, RetryAfter: 4100, ResetAfter: 5000}, d, "LimitFor %v", p.LimitFor != nil)
		assert.Equal(t, now+5000, decide(p, now+5000, now, 0).State, "a look, LimitFor %v", p.LimitFor != nil)
		assert.False(t, decide(p, d.State, now+4099, 1).Allowed, "1 ns before the end of the wait, LimitFor %v", p.LimitFor != nil)
		assert.True(t, decide(p, d.State, now+4100, 1).Allowed, "at the end of the wait, LimitFor %v", p.LimitFor != nil)
		assert.Equal(t, now+600, decide(p, now+600, now, 11).State, "a refusal changes nothing")
	}
	far := decide(plain, math.MaxInt64, now, 1)
	assert.Equal(t, decision{State: math.MaxInt64, RetryAfter: math.MaxInt64 - now - 900, ResetAfter: math.MaxInt64 - now}, far, "the farthest state: no overflow")

	q := dailyPolicy(t, 5, "UTC")
	q.LimitFor = keyed.LimitFor
	runQuota(t, q, at(t, "2026-03-12T00:00:00Z")+3, []quotaStep{ // 3 spent the next day, the clock went back
		{at: "2026-03-10T10:00:00Z", cost: 1, retry: 14 * time.Hour, reset: 14 * time.Hour, end: "2026-03-11T00:00:00Z", spent: 86400e9 + 3},
		{at: "2026-03-11T00:00:00Z", cost: 5, retry: 24 * time.Hour, remaining: 2, reset: 24 * time.Hour, end: "2026-03-12T00:00:00Z", spent: 3},
		{at: "2026-03-11T00:00:00Z", cost: 2, allowed: true, reset: 24 * time.Hour, end: "2026-03-12T00:00:00Z", spent: 5},
	})
}

// The debt algorithm, a settlement's charge (Limiter.Settle above what was reserved), is always
// allowed and takes cost more intervals past empty, exactly, saturated at
// the int64 limit, and never moves the state back; for a calendar quota
// the same at the period's end E, with 1 ns a token, but never past E +
// 2n, so that the debt ends at the reset.
func TestDebtDecide(t *testing.T) {
	const now = int64(1e18)
	rate := bucket(100, 10) // τ = 1000
	rate.Algorithm = algo.Debt
	for _, tc := range []struct{ state, cost, next, remaining int64 }{
		{0, 3, now + 300, 7},                             // a full bucket
		{now + 600, 3, now + 900, 1},                     // within the burst
		{now + 600, 7, now + 1300, 0},                    // past empty
		{now + 600, 100, now + 10600, 0},                 // exactly, past a burst of debt
		{now + 2500, 1, now + 2600, 0},                   // a state further ahead too
		{now + 600, math.MaxInt64 - 1, math.MaxInt64, 0}, // the product saturates
		{now + 600, 1 << 62, math.MaxInt64, 0},           // the product saturates
		{math.MaxInt64 - 50, 1, math.MaxInt64, 0},        // the sum saturates
		{math.MaxInt64, math.MaxInt64, math.MaxInt64, 0}, // and stays
		{now + 600, 0, now + 600, 4},                     // nothing to charge
		{now + 600, -4, now + 600, 4},                    // nor a negative cost
	} {
		d := decide(rate, tc.state, now, tc.cost)
		want := decision{Allowed: true, State: tc.next, Remaining: tc.remaining, ResetAfter: max(tc.next-now, 0)}
		assert.Equal(t, want, d, "debt Decide(now%+d, now, %d)", tc.state-now, tc.cost)
	}

	q := dailyPolicy(t, 10, "UTC")
	q.Algorithm = algo.Debt
	E := at(t, "2026-03-11T00:00:00Z")
	runQuota(t, q, E+8, []quotaStep{
		{at: "2026-03-10T10:00:00Z", cost: 5, allowed: true, reset: 14 * time.Hour, end: "2026-03-11T00:00:00Z", spent: 13},
		{at: "2026-03-10T10:00:00Z", cost: 100, allowed: true, reset: 14 * time.Hour, end: "2026-03-11T00:00:00Z", spent: 20},
		{at: "2026-03-10T10:00:00Z", cost: math.MaxInt64, allowed: true, reset: 14 * time.Hour, end: "2026-03-11T00:00:00Z", spent: 20},
		{at: "2026-03-11T00:00:00Z", cost: 4, allowed: true, remaining: 6, reset: 24 * time.Hour, end: "2026-03-12T00:00:00Z", spent: 4}, // the debt ended at the reset
	})
}
