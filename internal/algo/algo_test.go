package algo

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/tokenfair/ratelimit"
)

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
			d := TokenBucket(state, now, interval, burst, cost)
			allowed, remaining, retry, reset := model.take(now, cost)
			decisions++
			got := [4]int64{b2i(d.Allowed), d.Remaining, d.RetryAfter, d.ResetAfter}
			want := [4]int64{b2i(allowed), remaining, retry, reset}
			if got != want {
				differences++
				if differences < 5 {
					t.Errorf("trace %d: TokenBucket(%d, %d, %d, %d, %d) = %v, model says %v", trace, state, now, interval, burst, cost, got, want)
				}
			}
			state = d.State
		}
	}
	assert.Zero(t, differences, "differences in %d decisions", decisions)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
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
		lim := rate.NewLimiter(rate.Every(time.Duration(interval)), int(burst))
		var state, now int64
		for range 200 {
			now += rng.Int64N(2 * interval)
			cost := rng.Int64N(burst + 2)
			got := TokenBucket(state, epoch.UnixNano()+now, interval, burst, cost)
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
		d := TokenBucket(state, now, s, 5, r.cost)
		got := [4]int64{b2i(d.Allowed), d.Remaining, d.ResetAfter, d.RetryAfter}
		want := [4]int64{b2i(r.allowed), r.remaining, r.resetAfter * s / 10, r.retry * s / 10}
		require.Equal(t, want, got, "row %d: TokenBucket(%d, t=%.1fs, cost %d)", i, state, float64(r.at)/10, r.cost)
		state = d.State
	}
}

func TestTokenBucketInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		interval := 1 + rng.Int64N(int64(time.Second))
		burst := 1 + rng.Int64N(50)
		var state, now, admitted int64
		start := rng.Int64N(1e18)
		for range 500 {
			now += rng.Int64N(interval)
			cost := rng.Int64N(burst + 1)
			d := TokenBucket(state, start+now, interval, burst, cost)
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
				require.False(t, TokenBucket(d.State, start+now+d.RetryAfter-1, interval, burst, cost).Allowed)
				require.True(t, TokenBucket(d.State, start+now+d.RetryAfter, interval, burst, cost).Allowed)
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
		var state, elapsed, admitted int64
		start := int64(1_700_000_000) * int64(time.Second)
		for i := 0; i+1 < len(trace); i += 2 {
			elapsed += int64(trace[i]) * (interval/16 + 1)
			cost := int64(trace[i+1]) % (burst + 2)
			now := start + elapsed
			d := TokenBucket(state, now, interval, burst, cost)
			if d.Remaining < 0 || d.Remaining > burst || d.RetryAfter < 0 || d.ResetAfter < 0 {
				t.Fatalf("TokenBucket(%d, %d, %d, %d, %d) = %+v", state, now, interval, burst, cost, d)
			}
			if d.Allowed {
				admitted += cost
			} else if cost <= burst {
				if TokenBucket(state, now+d.RetryAfter-1, interval, burst, cost).Allowed {
					t.Fatalf("retry-after %d is too late: allowed a nanosecond earlier", d.RetryAfter)
				}
				if !TokenBucket(state, now+d.RetryAfter, interval, burst, cost).Allowed {
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
		bound := burst * interval
		var state, elapsed, admitted int64
		for i := 0; i+1 < len(trace); i += 2 {
			elapsed += int64(trace[i]) * (interval/8 + 1)
			cost := int64(trace[i+1]) % (burst + 2)
			d := Shape(state, elapsed, interval, burst, cost, bound, immediate)
			if d.Delay < 0 || d.Delay > bound || d.Remaining < 0 || d.RetryAfter < 0 {
				t.Fatalf("Shape(%d, %d, …, cost %d) = %+v", state, elapsed, cost, d)
			}
			if d.Allowed {
				admitted += cost
			} else if cost > 0 && cost <= burst {
				if Shape(state, elapsed+d.RetryAfter-1, interval, burst, cost, bound, immediate).Allowed ||
					!Shape(state, elapsed+d.RetryAfter, interval, burst, cost, bound, immediate).Allowed {
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
		b.Run(alg.String(), func(b *testing.B) {
			p := &ratelimit.Policy{Name: "bench", Limit: ratelimit.PerSecond(1_000_000).WithBurst(1_000_000_000), Algorithm: alg}
			var res ratelimit.Result
			state, now, allowed := int64(0), int64(1e18), 0
			for b.Loop() {
				state = Decide(p, state, now, 1, &res)
				if res.Allowed {
					allowed++
				}
				now += 500
			}
			if allowed == 0 {
				b.Fatal("nothing allowed")
			}
		})
	}
}

// TestNoOverflowAtTheLongestSpan: with a limit of MaxSpan, a state a whole
// span ahead and the clock in 2161, now plus two spans stays inside int64:
// the token bucket refuses with a wait of exactly one span, and the queue
// admits the request one span from now, moves on to two spans from now, and
// then is full.
func TestNoOverflowAtTheLongestSpan(t *testing.T) {
	now := time.Date(2161, 12, 31, 0, 0, 0, 0, time.UTC).UnixNano()
	span := ratelimit.MaxSpan
	limit := ratelimit.Every(span)
	var res ratelimit.Result

	state := Decide(&ratelimit.Policy{Limit: limit}, now+int64(span), now, 1, &res)
	assert.False(t, res.Allowed)
	assert.Equal(t, now+int64(span), state)
	assert.Equal(t, span, res.RetryAfter)
	assert.Equal(t, span, res.ResetAfter)

	state = Decide(&ratelimit.Policy{Limit: limit, Algorithm: ratelimit.LeakyShape}, now+int64(span), now, 1, &res)
	assert.True(t, res.Allowed)
	assert.Equal(t, now+2*int64(span), state)
	assert.Equal(t, span, res.Delay)
	assert.Equal(t, 2*span, res.ResetAfter)
	// A state that had wrapped around would look long past: the queue empty.
	assert.Greater(t, state, now)
	Decide(&ratelimit.Policy{Limit: limit, Algorithm: ratelimit.LeakyShape}, state, now, 1, &res)
	assert.False(t, res.Allowed, "the queue is full")
}
