package ratelimit_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/clientkey"
)

// plans is a table of per-key limits that a test changes as it goes, for
// Policy.LimitFor.
type plans struct {
	mu     sync.Mutex
	limits map[string]ratelimit.Limit
}

func (p *plans) set(key string, l ratelimit.Limit) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.limits == nil {
		p.limits = map[string]ratelimit.Limit{}
	}
	p.limits[key] = l
}

func (p *plans) remove(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.limits, key)
}

// limitFor is a Policy.LimitFor of the table.
func (p *plans) limitFor(key string) (ratelimit.Limit, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.limits[key]
	return l, ok
}

// TestLimitForRaisedKeepsWhatWasSpent: a key exhausted under 10 a day is
// given 100 an hour (letsencrypt/boulder#8785). Its state, 24 h ahead,
// counts as it is under the new limit (τ = 1 h, 36 s a token): nothing
// spent is forgiven by a change of limit, so the key waits 23h0m36s for
// its first token, as a key charged a debt of that much would; the
// operator who means to forgive it resets the key.
func TestLimitForRaisedKeepsWhatWasSpent(t *testing.T) {
	var table plans
	h := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "orders", Limit: ratelimit.Per(10, 24*time.Hour), LimitFor: table.limitFor}}})
	ctx := context.Background()
	res, err := h.lim.Take(ctx, "acct", 10)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	res, err = h.lim.Take(ctx, "acct", 1)
	require.NoError(t, err)
	require.False(t, res.Allowed)
	require.Equal(t, 2*time.Hour+24*time.Minute, res.RetryAfter, "the old limit's wait")

	table.set("acct", ratelimit.Per(100, time.Hour))
	res, err = h.lim.Take(ctx, "acct", 0)
	require.NoError(t, err)
	assert.Equal(t, 24*time.Hour, res.ResetAfter)
	assert.Equal(t, int64(0), res.Remaining)
	assert.Equal(t, ratelimit.Per(100, time.Hour), res.Policy.Limit)
	res = waitExactly(t, h, "acct", 1, 23*time.Hour+36*time.Second)
	assert.Equal(t, int64(0), res.Remaining)

	require.NoError(t, h.lim.Reset(ctx, "acct"))
	res, err = h.lim.Take(ctx, "acct", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(100), res.Remaining, "reset: the new limit's whole burst")
}

// A key's limit is read at each decision: a change applies at the key's
// next request, and a key the table does not hold has Policy.Limit. The
// Result's Policy is the policy with the key's limit, the same one for every
// decision under that limit.
func TestLimitForNextDecision(t *testing.T) {
	var table plans
	h := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.Per(10, time.Hour), LimitFor: table.limitFor}}})
	ctx := context.Background()
	own := &h.lim.Policies()[0]
	res, err := h.lim.Take(ctx, "alice", 1) // 6 min of 1 h spent
	require.NoError(t, err)
	assert.Same(t, own, res.Policy, "no entry: the policy itself")
	assert.Equal(t, int64(9), res.Remaining)

	table.set("alice", ratelimit.Per(100, time.Hour)) // 36 s a token
	res, err = h.lim.Take(ctx, "alice", 0)
	require.NoError(t, err)
	assert.Equal(t, ratelimit.Per(100, time.Hour), res.Policy.Limit)
	assert.Equal(t, "api", res.Policy.Name)
	assert.NotSame(t, own, res.Policy)
	assert.Equal(t, int64(90), res.Remaining, "the 6 minutes to full are 10 tokens of the new limit")
	again, err := h.lim.Take(ctx, "alice", 50)
	require.NoError(t, err)
	assert.True(t, again.Allowed)
	assert.Equal(t, int64(40), again.Remaining)
	assert.Same(t, res.Policy, again.Policy, "one copy of the policy per limit")

	bob, err := h.lim.Take(ctx, "bob", 0)
	require.NoError(t, err)
	assert.Same(t, own, bob.Policy)
	assert.Equal(t, int64(10), bob.Remaining, "another key keeps Policy.Limit")

	table.remove("alice") // 36 minutes to full: 6 tokens spent of 10
	res, err = h.lim.Take(ctx, "alice", 0)
	require.NoError(t, err)
	assert.Same(t, own, res.Policy)
	assert.Equal(t, int64(4), res.Remaining)

	// The same with several policies, a quota among them.
	table.set("carol", ratelimit.Daily(3, time.UTC))
	h = newEngine(t, setup{policies: []ratelimit.Policy{
		{Name: "rate", Limit: ratelimit.PerSecond(5).WithBurst(10)},
		{Name: "daily", Limit: ratelimit.Daily(100, time.UTC), LimitFor: table.limitFor},
	}})
	for _, want := range []bool{true, true, true, false} {
		res, err := h.lim.Take(ctx, "carol", 1)
		require.NoError(t, err)
		assert.Equal(t, want, res.Allowed)
	}
	assert.Equal(t, []int64{7, 0}, remaining(t, h.lim, "carol"))
	assert.Equal(t, []int64{10, 100}, remaining(t, h.lim, "dave"))
}

// A limit that LimitFor gives and the policy cannot apply is an error of
// kind limit-for (the server's mistake, not the client's) that names the
// policy and the limit, never the key; a quota may not move to another
// time zone; New refuses LimitFor with Global.
func TestLimitForErrors(t *testing.T) {
	ctx := context.Background()
	const key = "ak:secret-of-the-client"
	for _, tc := range []struct {
		policies []ratelimit.Policy
		give     ratelimit.Limit
		want     string
	}{
		{[]ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(5)}}, ratelimit.PerSecond(0),
			`ratelimit: policy "api": PerSecond(0): the number of tokens must be positive`},
		{[]ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(5)}}, ratelimit.Daily(10, nil),
			`ratelimit: policy "api": Daily(10, nil): a nil *time.Location; use time.UTC or time.LoadLocation`},
		{[]ratelimit.Policy{{Name: "daily", Limit: ratelimit.Daily(100, time.UTC)}}, ratelimit.PerSecond(5),
			`ratelimit: policy "daily": LimitFor gave 5/s, a rate, where Limit is a daily quota`},
		{[]ratelimit.Policy{{Name: "daily", Limit: ratelimit.Daily(100, time.UTC)}}, ratelimit.Monthly(100, time.UTC),
			`ratelimit: policy "daily": LimitFor gave 100/month (UTC), a monthly quota, where Limit is a daily quota`},
		{[]ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(5)}}, ratelimit.Daily(100, time.UTC),
			`ratelimit: policy "api": LimitFor gave 100/day (UTC), a daily quota, where Limit is a rate`},
		{[]ratelimit.Policy{{Name: "daily", Limit: ratelimit.Daily(100, time.UTC)}}, ratelimit.Daily(100, time.FixedZone("UTC+9", 9*3600)),
			`ratelimit: policy "daily": LimitFor gave 100/day (UTC+9), in another time zone than Limit's UTC: a quota's periods must not move`},
		{[]ratelimit.Policy{{Name: "daily", Limit: ratelimit.Daily(100, time.UTC)}}, ratelimit.Daily(100, time.FixedZone("UTC", 13*3600)),
			`ratelimit: policy "daily": LimitFor gave 100/day (UTC), in another time zone than Limit's UTC: a quota's periods must not move`},
		{[]ratelimit.Policy{{Name: "q", Limit: ratelimit.PerSecond(5).WithBurst(10), Algorithm: ratelimit.LeakyShape, Immediate: 5}}, ratelimit.PerSecond(3),
			`ratelimit: policy "q": Immediate 5 outside [0, burst 3]`},
		{[]ratelimit.Policy{{Name: "rate", Limit: ratelimit.PerSecond(5)}, {Name: "api", Limit: ratelimit.Per(100, time.Hour)}}, ratelimit.Per(0, time.Hour),
			`ratelimit: policy "api": Per(0, time.Hour): the number of tokens must be positive`},
	} {
		ps := tc.policies
		ps[len(ps)-1].LimitFor = func(string) (ratelimit.Limit, bool) { return tc.give, true }
		lim := newEngine(t, setup{policies: ps}).lim
		for range 2 { // an invalid limit is never kept
			_, err := lim.Take(ctx, key, 1)
			require.Error(t, err, "LimitFor gives %v", tc.give)
			assert.EqualError(t, err, tc.want)
			var ce *clientkey.Error
			if assert.ErrorAs(t, err, &ce) {
				assert.Equal(t, clientkey.KindLimitFor, ce.Kind)
			}
			assert.NotErrorIs(t, err, ratelimit.ErrBadRequest)
			assert.NotContains(t, err.Error(), "secret")
		}
	}

	_, err := ratelimit.New(takeOnly{}, ratelimit.Policy{Name: "g", Limit: ratelimit.PerSecond(100), Global: true,
		LimitFor: func(string) (ratelimit.Limit, bool) { return ratelimit.Limit{}, false }})
	assert.EqualError(t, err, `ratelimit: policy "g": LimitFor with Global: a global policy has one bucket, not one per key`)
}

// A cost above the key's own burst is refused before any store sees it,
// with the key's burst in the message; a cost within it passes even where
// it is above Policy.Limit's burst.
func TestLimitForCostAboveBurst(t *testing.T) {
	var table plans
	table.set("small", ratelimit.Per(3, time.Hour))
	table.set("large", ratelimit.Per(50, time.Hour))
	lim := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.Per(10, time.Hour), LimitFor: table.limitFor}}}).lim
	ctx := context.Background()
	_, err := lim.Take(ctx, "small", 5)
	assert.ErrorIs(t, err, ratelimit.ErrBadRequest)
	assert.ErrorContains(t, err, `cost 5, policy "api" has burst 3`)
	res, err := lim.Take(ctx, "large", 20)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, int64(30), res.Remaining)
	_, err = lim.Take(ctx, "other", 20)
	assert.ErrorContains(t, err, `cost 20, policy "api" has burst 10`)
}

// Past the 1024 limits a policy keeps a copy for, a decision under a new
// limit still applies it, and its Result is still the Limiter's for Refund
// and Charge.
func TestLimitForManyLimits(t *testing.T) {
	const n = 1100
	limitFor := func(key string) (ratelimit.Limit, bool) {
		i, err := strconv.Atoi(key)
		return ratelimit.Per(int64(i), time.Hour), err == nil
	}
	h := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.Per(1, time.Hour), LimitFor: limitFor}}})
	ctx := context.Background()
	for i := 1; i <= n; i++ {
		key := strconv.Itoa(i)
		took, err := h.lim.Take(ctx, key, int64(i))
		require.NoError(t, err)
		require.True(t, took.Allowed, "key %s", key)
		require.Equal(t, ratelimit.Per(int64(i), time.Hour), took.Policy.Limit)
		res, err := h.lim.Take(ctx, key, 1)
		require.NoError(t, err)
		require.False(t, res.Allowed, "key %s: its burst of %d is spent", key, i)
		iv := took.Policy.Limit.Interval()
		require.Equal(t, iv, res.RetryAfter, "key %s", key)
		if i == 1 || i > 1024 {
			require.NoError(t, h.lim.Refund(ctx, key, 1, took), "key %s", key)
			require.Equal(t, int64(1), look(t, h.lim, key).Remaining, "key %s: Refund(1)", key)
			require.NoError(t, h.lim.Settle(ctx, key, "requests", int64(i), int64(i)+2, took), "key %s", key)
			require.Equal(t, time.Duration(i+1)*iv, look(t, h.lim, key).ResetAfter, "key %s: 2 more", key)
		}
	}
}

// A key whose limit changes keeps the time its bucket needs to be full
// again, exactly, and never admits more at one instant than the new burst
// allows from it, whatever its bucket held under the old limit.
func TestLimitForChangeAtOneInstant(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	limits := []ratelimit.Limit{
		ratelimit.Per(10, 24*time.Hour), ratelimit.Per(100, time.Hour), ratelimit.PerSecond(5).WithBurst(10),
		ratelimit.PerSecond(1), ratelimit.Per(3, time.Minute).WithBurst(30), ratelimit.Per(1000, time.Hour).WithBurst(7),
	}
	ctx := context.Background()
	for range 200 {
		var table plans
		h := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(1), LimitFor: table.limitFor}}})
		from, to := limits[rng.IntN(len(limits))], limits[rng.IntN(len(limits))]
		table.set("k", from)
		for range rng.IntN(int(from.Burst()) + 1) {
			_, err := h.lim.Take(ctx, "k", 1)
			require.NoError(t, err)
		}
		toFull := look(t, h.lim, "k").ResetAfter
		table.set("k", to)
		res := look(t, h.lim, "k")
		tau := time.Duration(to.Burst()) * to.Interval()
		assert.Equal(t, toFull, res.ResetAfter, "%v → %v: the time to full carries over", from, to)
		admitted := int64(0)
		for {
			res, err := h.lim.Take(ctx, "k", 1)
			require.NoError(t, err)
			if !res.Allowed {
				break
			}
			admitted++
		}
		assert.LessOrEqual(t, admitted, to.Burst(), "%v → %v: admitted at once", from, to)
		assert.Equal(t, int64(max((tau-toFull)/to.Interval(), 0)), admitted, "%v → %v: admitted at once", from, to)
	}
}

// A decision for a key with its own limit, on the memory store, allocates
// nothing: finding the policy of its limit takes no lock and no copy.
func TestLimitForAllocs(t *testing.T) {
	table := map[string]ratelimit.Limit{"gold": ratelimit.Per(1_000_000, time.Second).WithBurst(1e9)}
	limitFor := func(key string) (ratelimit.Limit, bool) { l, ok := table[key]; return l, ok }
	h := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.Per(1_000_000, time.Second).WithBurst(1e9), LimitFor: limitFor}}})
	ctx := context.Background()
	for _, key := range []string{"gold", "plain"} {
		_, err := h.lim.Take(ctx, key, 1)
		require.NoError(t, err)
		assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = h.lim.Take(ctx, key, 1) }), "Take(%q) allocates", key)
	}
}

// A quota's zone loaded twice is one zone: LimitFor may give it.
func TestLimitForZoneLoadedTwice(t *testing.T) {
	a, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	b, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	h := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "daily", Limit: ratelimit.Daily(100, a),
		LimitFor: func(string) (ratelimit.Limit, bool) { return ratelimit.Daily(50, b), true }}}})
	res, err := h.lim.Take(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.Equal(t, int64(49), res.Remaining)
}
