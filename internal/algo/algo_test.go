package algo

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
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
