package algo

import (
	"math/big"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

const ms = int64(time.Millisecond)

// TestShapeSchedule is the seed's example: 5/s, burst 10, twelve requests at
// once: one runs now, ten wait 0.2 s … 2.0 s, the twelfth is refused.
func TestShapeSchedule(t *testing.T) {
	const iv, burst = 200 * ms, 10
	now := int64(1_700_000_000) * int64(time.Second)
	var state int64
	for i := range int64(12) {
		d := Shape(state, now, iv, burst, 1, burst*iv, 0)
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
	run := func(name string, bound, immediate int64, steps []step) {
		t.Helper()
		var state, now int64 = 0, 1e18
		for i, s := range steps {
			now += s.advance
			d := Shape(state, now, iv, burst, s.cost, bound, immediate)
			got := [3]int64{b2i(d.Allowed), d.Delay, d.RetryAfter}
			want := [3]int64{b2i(s.allowed), s.delay, s.retry}
			assert.Equal(t, want, got, "%s step %d: Shape(cost %d after %d)", name, i, s.cost, s.advance)
			state = d.State
		}
	}
	run("edge", tau, 0, []step{
		{cost: 10, allowed: true},
		{cost: 1, allowed: true, delay: tau}, // a wait of exactly the queue's room
		{cost: 1, retry: iv},                 // 2.2 s: refused
		{advance: iv - 1, cost: 1, retry: 1}, // 2.0 s + 1 ns: refused
		{advance: 1, cost: 1, allowed: true, delay: tau},
	})
	run("costs", tau, 0, []step{
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
		var state, now int64 = 0, 1e18
		for i, s := range steps {
			d := Shape(state, now, iv, 12, s.cost, 12*iv, 8)
			assert.Equal(t, [3]int64{b2i(s.allowed), s.delay, s.retry}, [3]int64{b2i(d.Allowed), d.Delay, d.RetryAfter}, "nginx delay=8, request %d", i+1)
			state = d.State
		}
	}()
	// A maximum wait of 500 ms below the 2 s room: waits 0, 200, 400 pass.
	run("max delay", 500*ms, 0, []step{
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
// and so do the token bucket's.
func TestLeakyPoliceIsTheTokenBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	differences, decisions := 0, 0
	for range 1000 {
		limit := ratelimit.Limit{Interval: time.Duration(4 * (1 + rng.Int64N(1e8))), Burst: 1 + rng.Int64N(15)}
		police := ratelimit.Policy{Name: "p", Limit: limit, Algorithm: ratelimit.LeakyPolice}
		bucket := ratelimit.Policy{Name: "p", Limit: limit}
		iv := int64(limit.Interval)
		now := rng.Int64N(1e18)
		meter := &waterMeter{interval: iv, burst: limit.Burst, level: new(big.Rat), last: now}
		var ps, bs int64
		for range 100 {
			now += rng.Int64N(3) * iv / 4 * rng.Int64N(3)
			cost := rng.Int64N(limit.Burst + 2)
			var pr, br ratelimit.Result
			ps = Decide(&police, ps, now, cost, &pr)
			bs = Decide(&bucket, bs, now, cost, &br)
			want := meter.pour(now, cost)
			decisions++
			if pr.Allowed != want || br.Allowed != want || !reflect.DeepEqual(pr, br) {
				differences++
			}
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
		bound := burst * iv
		if rng.IntN(2) == 0 {
			bound = min(bound, rng.Int64N(bound)+immediate*iv)
		}
		var state, now int64
		start := rng.Int64N(1e18)
		for range 300 {
			now += rng.Int64N(2 * iv)
			cost := rng.Int64N(burst + 1)
			d := Shape(state, start+now, iv, burst, cost, bound, immediate)
			require.GreaterOrEqual(t, d.Remaining, int64(0))
			require.LessOrEqual(t, d.Remaining, burst)
			require.GreaterOrEqual(t, d.Delay, int64(0))
			require.LessOrEqual(t, d.Delay, bound)
			require.GreaterOrEqual(t, d.RetryAfter, int64(0))
			if !d.Allowed && cost > 0 && cost <= burst {
				require.False(t, Shape(state, start+now+d.RetryAfter-1, iv, burst, cost, bound, immediate).Allowed, "one nanosecond early")
				require.True(t, Shape(state, start+now+d.RetryAfter, iv, burst, cost, bound, immediate).Allowed, "on time")
			}
			if d.Allowed && d.Remaining > 0 {
				require.True(t, Shape(d.State, start+now, iv, burst, 1, bound, immediate).Allowed, "Remaining > 0 promises one more")
			}
			state = d.State
		}
	}
}
