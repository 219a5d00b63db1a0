package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
	"github.com/tokenfair/ratelimit/internal/refusers"
)

// Refund gives back what an allowed Take spent, in part or in whole.
func TestLimiterRefund(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		refund []int64 // the give-backs of the take of 6, in turn
		want   int64   // what is left then, of 10
	}{
		{nil, 1},
		{[]int64{2}, 3},
		{[]int64{6}, 7},
		{[]int64{2, 3}, 6},
		{[]int64{0, -3}, 1},
	} {
		lim := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.Per(10, time.Hour)}}}).lim
		_, err := lim.Take(ctx, "k", 3)
		require.NoError(t, err)
		took, err := lim.Take(ctx, "k", 6)
		require.NoError(t, err)
		require.True(t, took.Allowed)
		for _, n := range tc.refund {
			require.NoError(t, lim.Refund(ctx, "k", n, took), "Refund(%d)", n)
		}
		assert.Equal(t, []int64{tc.want}, remaining(t, lim, "k"), "after the give-backs %v of a take of 6", tc.refund)
	}
}

// Refund of a refused or degraded Result, or of one this Limiter did not
// make, gives back nothing.
func TestLimiterRefundNothing(t *testing.T) {
	ctx := context.Background()
	lim := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.Per(3, time.Hour)}}}).lim
	_, err := lim.Take(ctx, "k", 2)
	require.NoError(t, err)
	refused, err := lim.Take(ctx, "k", 2)
	require.NoError(t, err)
	require.False(t, refused.Allowed)
	require.NoError(t, lim.Refund(ctx, "k", 2, refused))
	assert.Equal(t, []int64{1}, remaining(t, lim, "k"), "a refusal spent nothing")

	took, err := lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, took.Allowed)
	degraded := took
	degraded.Degraded = true
	require.NoError(t, lim.Refund(ctx, "k", 1, degraded))
	assert.Equal(t, []int64{0}, remaining(t, lim, "k"), "a degraded result is no take of the store")
	made := ratelimit.Result{Allowed: true, Policy: &lim.Policies()[0]}
	require.NoError(t, lim.Refund(ctx, "k", 1, made))
	assert.Equal(t, []int64{0}, remaining(t, lim, "k"), "a Result not of Take spent nothing")
}

// Refund refuses an empty key, and a Result of another Limiter, giving
// back nothing.
func TestLimiterRefundErrors(t *testing.T) {
	ctx := context.Background()
	h := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.Per(3, time.Hour)}}})
	other, err := ratelimit.New(h.store, ratelimit.Policy{Name: "api", Limit: ratelimit.Per(3, time.Hour)})
	require.NoError(t, err)
	took, err := h.lim.Take(ctx, "k", 2)
	require.NoError(t, err)
	assert.ErrorIs(t, h.lim.Refund(ctx, "", 2, took), ratelimit.ErrMissingKey)
	err = other.Refund(ctx, "k", 2, took)
	assert.ErrorContains(t, err, `the Result is not of this Limiter's Take (its policy: "api")`)
	assert.Equal(t, []int64{1}, remaining(t, h.lim, "k"), "nothing given back")
}

// With several policies, Refund gives back to each policy that spent, dry-run
// ones included.
func TestLimiterRefundPolicies(t *testing.T) {
	ctx := context.Background()
	for refund, want := range map[int64][]int64{2: {2, 5, 3}, 4: {4, 7, 5}} {
		lim := newEngine(t, setup{policies: []ratelimit.Policy{
			{Name: "burst", Limit: ratelimit.PerSecond(1).WithBurst(5)},
			{Name: "hourly", Limit: ratelimit.Per(8, time.Hour)},
			{Name: "shadow", Limit: ratelimit.Per(6, time.Hour), DryRun: true},
		}}).lim
		_, err := lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		took, err := lim.Take(ctx, "k", 4)
		require.NoError(t, err)
		require.True(t, took.Allowed)
		require.Equal(t, []int64{0, 3, 1}, remaining(t, lim, "k"))
		require.NoError(t, lim.Refund(ctx, "k", refund, took))
		assert.Equal(t, want, remaining(t, lim, "k"), "Refund(%d) of a take of 4", refund)
	}
}

// refundFails is a store whose give-backs fail.
type refundFails struct{ ratelimit.Store }

func (refundFails) Refund(context.Context, *ratelimit.Policy, string, int64, ratelimit.Result) error {
	return errors.New("connection reset")
}

// A store that cannot give back makes Refund fail with ErrStore; a store
// without Refund makes it do nothing.
func TestLimiterRefundStore(t *testing.T) {
	ctx := context.Background()
	p := ratelimit.Policy{Name: "api", Limit: ratelimit.Per(3, time.Hour)}
	lim := newEngine(t, setup{policies: []ratelimit.Policy{p}, wrap: func(s ratelimit.Store) ratelimit.Store { return refundFails{s} }}).lim
	took, err := lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	err = lim.Refund(ctx, "k", 1, took)
	assert.ErrorIs(t, err, ratelimit.ErrStore)
	assert.ErrorContains(t, err, "connection reset")

	type takeOnly struct{ ratelimit.Store }
	lim = newEngine(t, setup{policies: []ratelimit.Policy{p}, wrap: func(s ratelimit.Store) ratelimit.Store { return takeOnly{s} }}).lim
	took, err = lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.NoError(t, lim.Refund(ctx, "k", 1, took))
	assert.Equal(t, []int64{2}, remaining(t, lim, "k"))
}

// Limiter.Refund gives a quota's tokens back within the day; after
// midnight it gives back nothing, neither more than the quota nor any of
// the new day's spending.
func TestQuotaLimiterRefund(t *testing.T) {
	ctx := context.Background()
	h := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "daily", Limit: ratelimit.Daily(10, time.UTC)}}})
	took, err := h.lim.Take(ctx, "k", 6)
	require.NoError(t, err)
	require.True(t, took.Allowed)
	h.clock.Advance(time.Hour)
	require.NoError(t, h.lim.Refund(ctx, "k", 2, took))
	assert.Equal(t, []int64{6}, remaining(t, h.lim, "k"), "2 of 6 given back")
	require.NoError(t, h.lim.Refund(ctx, "k", 4, took))
	assert.Equal(t, []int64{10}, remaining(t, h.lim, "k"), "all 6 given back")

	took, err = h.lim.Take(ctx, "k", 6)
	require.NoError(t, err)
	h.clock.Advance(untilMidnight - time.Hour)
	require.Equal(t, []int64{10}, remaining(t, h.lim, "k"), "midnight")
	require.NoError(t, h.lim.Refund(ctx, "k", 2, took))
	assert.Equal(t, []int64{10}, remaining(t, h.lim, "k"), "a full quota gets nothing back")
	_, err = h.lim.Take(ctx, "k", 3)
	require.NoError(t, err)
	require.NoError(t, h.lim.Refund(ctx, "k", 2, took))
	assert.Equal(t, []int64{7}, remaining(t, h.lim, "k"), "yesterday's take gives nothing back of today's")
}

// A charge takes past empty: the key's next request waits exactly until
// the debt is repaid and its own token earned, and not a nanosecond less.
func TestChargePastEmpty(t *testing.T) {
	ctx := context.Background()
	h := newEngine(t, setup{limit: ratelimit.Per(10, 10*time.Second)}) // a token a second, τ = 10 s
	took, err := h.lim.Take(ctx, "k", 10)
	require.NoError(t, err)
	require.True(t, took.Allowed)
	require.NoError(t, h.lim.Settle(ctx, "k", "requests", 10, 15, took))
	res := look(t, h.lim, "k")
	assert.Equal(t, int64(0), res.Remaining)
	assert.Equal(t, 15*time.Second, res.ResetAfter, "10 s of burst and 5 s of debt")

	waitExactly(t, h, "k", 1, 6*time.Second) // 5 s of debt and 1 s for the token
}

// A charge is exact: the key waits what it spent, however much, and
// RetryAfter says so; a charge so large that it saturates is the farthest
// debt, never nothing.
func TestChargeExact(t *testing.T) {
	ctx := context.Background()
	h := newEngine(t, setup{limit: ratelimit.Per(10, 10*time.Second)}) // a token a second
	took, err := h.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	require.NoError(t, h.lim.Settle(ctx, "k", "requests", 1, 101, took))
	assert.Equal(t, 101*time.Second, look(t, h.lim, "k").ResetAfter, "after a cost of 101")
	res, err := h.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, 92*time.Second, res.RetryAfter, "the debt repaid, and one token")
	h.clock.Advance(92*time.Second - 1)
	res, err = h.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "1 ns before the debt is repaid")
	h.clock.Advance(1)
	res, err = h.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "once the debt is repaid")

	for _, cost := range []int64{math.MaxInt64 - 1, 1 << 62, math.MaxInt64} {
		key := fmt.Sprintf("k%d", cost)
		took, err := h.lim.Take(ctx, key, 1)
		require.NoError(t, err)
		require.NoError(t, h.lim.Settle(ctx, key, "requests", 1, cost, took))
		res, err := h.lim.Take(ctx, key, 1)
		require.NoError(t, err)
		assert.False(t, res.Allowed, "after a cost of %d", cost)
		assert.Greater(t, res.RetryAfter, 200*365*24*time.Hour, "after a cost of %d: the saturated debt", cost)
	}
}

// A calendar quota's debt is refused until the reset, when it ends: the
// key finds its whole quota then.
func TestChargeQuota(t *testing.T) {
	ctx := context.Background()
	h := newEngine(t, setup{limit: ratelimit.Daily(10, time.UTC)})
	took, err := h.lim.Take(ctx, "k", 4)
	require.NoError(t, err)
	require.NoError(t, h.lim.Settle(ctx, "k", "requests", 4, 7, took))
	assert.Equal(t, int64(3), look(t, h.lim, "k").Remaining, "7 spent")
	require.NoError(t, h.lim.Settle(ctx, "k", "requests", 4, 104, took))
	assert.Equal(t, int64(0), look(t, h.lim, "k").Remaining)
	res, err := h.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.Equal(t, untilMidnight, res.RetryAfter)

	h.clock.Advance(untilMidnight - 1)
	res, err = h.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.Equal(t, time.Duration(1), res.RetryAfter)
	h.clock.Advance(1)
	assert.Equal(t, int64(10), look(t, h.lim, "k").Remaining, "the debt ended at midnight")
}

// A charge (Settle above what was reserved) charges every policy whose
// result allowed the request, dry-run and Global ones included, and none
// that refused it.
func TestChargePolicies(t *testing.T) {
	ctx := context.Background()
	h := newEngine(t, setup{policies: []ratelimit.Policy{
		{Name: "burst", Limit: ratelimit.PerSecond(1).WithBurst(10)},
		{Name: "hourly", Limit: ratelimit.Per(100, time.Hour)},
		{Name: "shadow", Limit: ratelimit.Per(20, time.Hour), DryRun: true},
		{Name: "tight", Limit: ratelimit.Per(4, time.Hour), DryRun: true},
		{Name: "global", Limit: ratelimit.Per(1000, time.Hour), Global: true},
		{Name: "daily", Limit: ratelimit.Daily(50, time.UTC)},
	}})
	took, err := h.lim.Take(ctx, "k", 5)
	require.NoError(t, err)
	require.True(t, took.Allowed)
	require.Equal(t, []string{"tight"}, refusers.Names(took, true))
	require.NoError(t, h.lim.Settle(ctx, "k", "requests", 5, 8, took))
	assert.Equal(t, []int64{2, 92, 12, 4, 992, 42}, remaining(t, h.lim, "k"))
	assert.Equal(t, int64(992), look(t, h.lim, "other").Results[4].Remaining, "the global bucket is every key's")
}

// Settle charges nothing for a refused Result or a cost at most what was
// reserved, and refuses an empty key and a Result of another Limiter; a
// store's failure to charge is ErrStore.
func TestSettleChargesNothingAndErrors(t *testing.T) {
	ctx := context.Background()
	p := ratelimit.Policy{Name: "api", Limit: ratelimit.Per(3, time.Hour)}
	h := newEngine(t, setup{policies: []ratelimit.Policy{p}})
	took, err := h.lim.Take(ctx, "k", 2)
	require.NoError(t, err)
	refused, err := h.lim.Take(ctx, "k", 2)
	require.NoError(t, err)
	require.False(t, refused.Allowed)
	for _, tc := range []struct {
		cost int64
		took ratelimit.Result
		what string
	}{{7, refused, "a refusal"}, {2, took, "the cost reserved"}} {
		require.NoError(t, h.lim.Settle(ctx, "k", "requests", 2, tc.cost, tc.took), "Settle of %s", tc.what)
		assert.Equal(t, 40*time.Minute, look(t, h.lim, "k").ResetAfter, "Settle of %s charges nothing", tc.what)
	}

	err = h.lim.Settle(ctx, "", "requests", 2, 3, took)
	assert.ErrorIs(t, err, ratelimit.ErrMissingKey)
	other, err := ratelimit.New(h.store, p)
	require.NoError(t, err)
	assert.EqualError(t, other.Settle(ctx, "k", "requests", 2, 3, took), `ratelimit: Settle: the Result is not of this Limiter's Take (its policy: "api")`)
	assert.ErrorContains(t, h.lim.Settle(ctx, "k", "requests", 2, 3, ratelimit.Result{Allowed: true}), "(its policy: none)")
	assert.Equal(t, 40*time.Minute, look(t, h.lim, "k").ResetAfter, "nothing charged")

	failing := newEngine(t, setup{policies: []ratelimit.Policy{p}, wrap: func(s ratelimit.Store) ratelimit.Store { return debtFails{s} }})
	took, err = failing.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	err = failing.lim.Settle(ctx, "k", "requests", 1, 2, took)
	assert.ErrorIs(t, err, ratelimit.ErrStore)
	assert.ErrorContains(t, err, "connection reset")
}

// debtFails is a store whose charges (the takes of a debt) fail.
type debtFails struct{ ratelimit.Store }

func (s debtFails) Take(ctx context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	if p.Algorithm == algo.Debt {
		return ratelimit.Result{}, errors.New("connection reset")
	}
	return s.Store.Take(ctx, p, key, cost)
}

// settleModel is a model of one key's token bucket in whole nanoseconds,
// written from the rules rather than from the code: F is the time the
// bucket needs to be full again; a take of r > 0 is allowed iff F + r ×
// interval ≤ τ and adds r × interval; a refund takes back at most what is
// left to earn; a charge adds its cost exactly. A calendar quota is the
// same bucket of 1 ns a token, whose time runs only at its period's end
// (vnow), and whose debt stops at 2τ (it ends at the reset).
type settleModel struct {
	interval, burst int64
	quota           bool
	vnow            func(now int64) int64
	state           int64 // the instant the bucket is full again, in vnow's time
}

// full returns F at now, and τ.
func (m *settleModel) full(now int64) (f, tau int64) {
	return max(m.state-m.vnow(now), 0), m.burst * m.interval
}

func (m *settleModel) take(now, cost int64) (allowed bool, remaining, retry, reset int64) {
	f, tau := m.full(now)
	if cost == 0 {
		return true, min(max((tau-f)/m.interval, 0), m.burst), 0, f // a look
	}
	if allowed = f+cost*m.interval <= tau; allowed {
		f += cost * m.interval
		m.state = m.vnow(now) + f
	} else {
		retry = f + cost*m.interval - tau
	}
	return allowed, min(max((tau-f)/m.interval, 0), m.burst), retry, f
}

func (m *settleModel) refund(now, cost int64) {
	f, _ := m.full(now)
	m.state -= min(cost*m.interval, f)
}

func (m *settleModel) charge(now, cost int64) {
	f, tau := m.full(now)
	debt := f + cost*m.interval
	if m.quota {
		debt = min(debt, 2*tau)
	}
	m.state = max(m.state, m.vnow(now)+debt)
}

// TestSettleMatchesModel replays random requests, each reserving r tokens
// and settling s once answered (Refund of r − s, or Charge of s − r), at
// random times on the fake clock, sometimes settled later, through a
// Limiter on the memory store, and compares every decision, and the bucket
// after every settlement, with settleModel; for rates and a daily quota.
func TestSettleMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	ctx := context.Background()
	differences, decisions := 0, 0
	for trace := range 300 {
		burst := 1 + rng.Int64N(12)
		m := &settleModel{interval: 1 + rng.Int64N(int64(time.Second)), burst: burst, vnow: func(now int64) int64 { return now }}
		p := ratelimit.Policy{Name: "p", Limit: ratelimit.Per(1, time.Duration(m.interval)).WithBurst(burst)}
		step := func() time.Duration { return time.Duration(rng.Int64N(3 * m.interval)) }
		quota := trace%4 == 3
		if quota {
			p.Limit = ratelimit.Daily(burst, time.UTC)
			m.interval, m.quota = 1, true
			m.vnow = func(now int64) int64 { _, end := p.Limit.Period(time.Unix(0, now)); return end.UnixNano() }
			step = func() time.Duration { return time.Duration(rng.Int64N(int64(6 * time.Hour))) }
		}
		h := newEngine(t, setup{policies: []ratelimit.Policy{p}})
		check := func(what string, res ratelimit.Result, allowed bool, remaining, retry, reset int64) {
			t.Helper()
			decisions++
			now := h.clock.Now().UnixNano()
			if quota { // a quota's waits run to its period's end
				if reset = m.vnow(now) - now; retry != 0 {
					retry = reset
				}
			}
			got := [4]int64{b2i(res.Allowed), res.Remaining, int64(res.RetryAfter), int64(res.ResetAfter)}
			if want := [4]int64{b2i(allowed), remaining, retry, reset}; got != want {
				if differences++; differences <= 5 {
					t.Errorf("trace %d: %v: %s: [allowed remaining retry reset] = %v, model says %v", trace, p.Limit, what, got, want)
				}
			}
		}
		for range 100 {
			h.clock.Advance(step())
			r := 1 + rng.Int64N(burst)
			took, err := h.lim.Take(ctx, "k", r)
			require.NoError(t, err)
			allowed, remaining, retry, reset := m.take(h.clock.Now().UnixNano(), r)
			check(fmt.Sprintf("Take(%d)", r), took, allowed, remaining, retry, reset)
			if !took.Allowed {
				continue
			}
			if rng.IntN(3) == 0 {
				h.clock.Advance(step()) // answered later
			}
			s := rng.Int64N(3*burst + 1)
			now := h.clock.Now().UnixNano()
			switch {
			case s < r:
				require.NoError(t, h.lim.Refund(ctx, "k", r-s, took))
				m.refund(now, r-s)
			case s > r:
				require.NoError(t, h.lim.Settle(ctx, "k", "requests", r, s, took))
				m.charge(now, s-r)
			}
			allowed, remaining, retry, reset = m.take(now, 0)
			check(fmt.Sprintf("after Take(%d) settled at %d", r, s), look(t, h.lim, "k"), allowed, remaining, retry, reset)
		}
	}
	assert.Zero(t, differences, "differences in %d decisions", decisions)
}

// TestSettleStillClock: with the clock held still, each admitted request
// moves its bucket by exactly its settled cost × interval (the key is
// charged exactly the sum of its settled costs, debt included); a request is admitted only if the bucket holds what it reserves
// after the costs settled before it, so the tokens settled exceed the burst
// only by the last admitted request, the one that goes into debt; after it
// nothing is admitted.
func TestSettleStillClock(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	ctx := context.Background()
	for range 300 {
		burst := 1 + rng.Int64N(20)
		iv := 1 + rng.Int64N(int64(time.Second))
		h := newEngine(t, setup{limit: ratelimit.Per(1, time.Duration(iv)).WithBurst(burst)})
		var settled int64 // the sum of the settled costs of the admitted requests
		inDebt := false
		for i := range 50 {
			r := 1 + rng.Int64N(burst)
			took, err := h.lim.Take(ctx, "k", r)
			require.NoError(t, err)
			require.Equal(t, !inDebt && settled+r <= burst, took.Allowed, "request %d: Take(%d) with %d of %d settled", i, r, settled, burst)
			if !took.Allowed {
				continue
			}
			s := rng.Int64N(2*burst + 1)
			if s < r {
				require.NoError(t, h.lim.Refund(ctx, "k", r-s, took))
			} else {
				require.NoError(t, h.lim.Settle(ctx, "k", "requests", r, s, took))
			}
			settled += s
			inDebt = settled > burst
			assert.Equal(t, time.Duration(settled*iv), look(t, h.lim, "k").ResetAfter,
				"request %d: the bucket after settling %d (%d in all) of a burst of %d", i, s, settled, burst)
		}
	}
}

// Refund and Settle of one policy's result, of a Limiter of several, are
// errors naming the cause: they would otherwise do nothing.
func TestSettleOnePolicysResult(t *testing.T) {
	ctx := context.Background()
	h := newEngine(t, setup{policies: []ratelimit.Policy{
		{Name: "a", Limit: ratelimit.PerSecond(5)}, {Name: "b", Limit: ratelimit.PerSecond(50)},
	}})
	res, err := h.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	const want = `ratelimit: %s: the Result is policy "a"'s alone; pass the Result Take returned, which holds each of the 2 policies'`
	assert.EqualError(t, h.lim.Settle(ctx, "k", "requests", 1, 1001, res.Results[0]), fmt.Sprintf(want, "Settle"))
	assert.EqualError(t, h.lim.Refund(ctx, "k", 1, res.Results[0]), fmt.Sprintf(want, "Refund"))
	require.NoError(t, h.lim.Settle(ctx, "k", "requests", 1, 1001, res))
	res, err = h.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "the whole Result: charged")
}

// Settle sets one unit's cost: the others keep what they reserved.
func TestSettleOneUnit(t *testing.T) {
	ctx := context.Background()
	lim := meters(t)
	took, err := lim.TakeUnits(ctx, "k", map[string]int64{"requests": 5, "tokens": 60})
	require.NoError(t, err)
	require.True(t, took.Allowed)
	require.NoError(t, lim.Settle(ctx, "k", "tokens", 60, 25, took))
	assert.Equal(t, []int64{5, 75, 999}, remaining(t, lim, "k"), "35 tokens back, nothing else")
	require.NoError(t, lim.Settle(ctx, "k", "content-bytes", 1, 301, took))
	assert.Equal(t, []int64{5, 75, 699}, remaining(t, lim, "k"), "300 more bytes")
	require.NoError(t, lim.Settle(ctx, "k", "requests", 5, 0, took))
	assert.Equal(t, []int64{9, 75, 699}, remaining(t, lim, "k"), "a cost of 0 settles at 1")

	assert.EqualError(t, lim.Settle(ctx, "k", "credits", 1, 1, took), `ratelimit: Settle: no policy counts the unit "credits" (the units: ["requests" "tokens" "content-bytes"])`)
	assert.EqualError(t, lim.Settle(ctx, "k", "tokens", 60, -1, took), "ratelimit: Settle: negative cost -1 of tokens")
}
