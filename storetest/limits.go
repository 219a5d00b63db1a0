package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

// testChangedLimit: a key's bucket under a policy whose limit changed
// (Policy.LimitFor gives the store a policy of the same name with another
// Limit) is decided by the new limit at once, on the state the old one
// left: the time the bucket needs to be full again, exactly, nothing
// forgiven. So a key that spent all of Per(10, 24h), given
// Per(100, time.Hour), is refused, its first token 23 h + 36 s away; from
// then on, a client that retries when told and charges past empty are
// decided as Decide decides on the state the old limit left. A key that
// spent half of Per(100, time.Hour), given Per(10, 24h), has 9 tokens: a
// downgrade never admits more at one instant than the new burst.
func testChangedLimit(t *testing.T, c *Clock, s ratelimit.Store) {
	daily := policy("plan", ratelimit.Per(10, 24*time.Hour))
	hourly := policy("plan", ratelimit.Per(100, time.Hour))
	var m model
	m.take(daily, c, 10)
	run(t, c, s, daily, []step{{cost: 10, want: allowed(0, 24*time.Hour)}})
	run(t, c, s, hourly, []step{{cost: 1, want: refused(0, 23*time.Hour+36*time.Second, 24*time.Hour)}})
	m.take(hourly, c, 1)
	for i := range 4 {
		want := m.take(hourly, c, 0)
		run(t, c, s, hourly, []step{{cost: 0, want: want}})
		want = m.take(owing(hourly), c, int64(i))
		run(t, c, s, owing(hourly), []step{{cost: int64(i), want: want}})
		want = m.take(hourly, c, 1)
		run(t, c, s, hourly, []step{{cost: 1, want: want}})
		if want.Allowed {
			break
		}
		c.Advance(want.RetryAfter)
	}

	run(t, c, s, hourly, []step{{key: "down", cost: 50, want: allowed(50, 30*time.Minute)}})
	run(t, c, s, daily, []step{
		{key: "down", cost: 10, want: refused(9, 30*time.Minute, 30*time.Minute)},
		{key: "down", cost: 9, want: allowed(0, 22*time.Hour+6*time.Minute)},
		{key: "down", cost: 1, want: refused(0, 30*time.Minute, 22*time.Hour+6*time.Minute)},
	})
}

// model is one bucket that Decide alone decides: what a store must answer.
type model struct{ state int64 }

// take decides a request of cost under p at c's now in m, and returns the
// result a store's Take must give (but for Until, the store's own).
func (m *model) take(p *ratelimit.Policy, c *Clock, cost int64) ratelimit.Result {
	var res ratelimit.Result
	res, m.state = p.Decide(m.state, c.Now().UnixNano(), cost)
	res.Until = 0
	return res
}

// testQuotaChangedLimit: a calendar quota whose count changed keeps the
// tokens spent in the period: raised, they are spent of the new count;
// lowered below them, the key is refused until the reset, and raised
// again, it has what the larger count leaves (a refusal forgot nothing).
func testQuotaChangedLimit(t *testing.T, c *Clock, s ratelimit.Store) {
	small := policy("daily", ratelimit.Daily(5, time.UTC))
	large := policy("daily", ratelimit.Daily(100, time.UTC))
	c.Advance(10 * time.Hour)
	run(t, c, s, small, []step{{cost: 5, want: allowed(0, 14*time.Hour)}})
	run(t, c, s, large, []step{
		{cost: 1, want: allowed(94, 14*time.Hour)},
		{key: "down", cost: 50, want: allowed(50, 14*time.Hour)},
	})
	run(t, c, s, small, []step{{key: "down", cost: 1, want: refused(0, 14*time.Hour, 14*time.Hour)}})
	run(t, c, s, large, []step{{key: "down", cost: 0, want: allowed(50, 14*time.Hour)}})
	run(t, c, s, small, []step{{key: "down", advance: 14 * time.Hour, cost: 5, want: allowed(0, 24*time.Hour)}})

	// The same through a Limiter whose keys' quotas change (LimitFor): a
	// key that spent 1 000 of 1 000, cut to 10 and refused, then given its
	// 1 000 again, has nothing more that day.
	pl := &plans{limits: map[string]ratelimit.Limit{}}
	l := limiter(t, s, ratelimit.Policy{Name: "plan-daily", Limit: ratelimit.Daily(1000, time.UTC), LimitFor: pl.limitFor})
	require.True(t, limit(t, l, "k", 1000).Allowed)
	pl.set("k", ratelimit.Daily(10, time.UTC))
	require.False(t, limit(t, l, "k", 1).Allowed)
	pl.set("k", ratelimit.Daily(1000, time.UTC))
	res := limit(t, l, "k", 1)
	assert.False(t, res.Allowed, "cut and restored: what was spent stays spent")
	assert.Equal(t, int64(0), res.Remaining)
}

// testLimitForGiveBack: a take made under a key's old limit, given back
// after the limit was raised and the bucket spent under the new one,
// credits nothing the exact bucket did not earn back: at no instant are
// more admitted than the new burst.
func testLimitForGiveBack(t *testing.T, c *Clock, s ratelimit.Store) {
	if _, ok := s.(ratelimit.RefundStore); !ok {
		t.Skipf("%T is not a ratelimit.RefundStore", s)
	}
	pl := &plans{limits: map[string]ratelimit.Limit{"k": ratelimit.Per(1, time.Minute)}}
	l := limiter(t, s, ratelimit.Policy{Name: "plan", Limit: ratelimit.Per(1, time.Minute), LimitFor: pl.limitFor})
	ctx := context.Background()
	old := limit(t, l, "k", 1)
	require.True(t, old.Allowed)
	pl.set("k", ratelimit.PerSecond(10))
	admitted := func() (n int) {
		for limit(t, l, "k", 1).Allowed {
			n++
		}
		return n
	}
	assert.Zero(t, admitted(), "the old take's minute holds under the new limit")
	c.Advance(59500 * ms)
	assert.Equal(t, 5, admitted(), "half a second before the minute ends: half the new burst")
	require.NoError(t, l.Refund(ctx, "k", 1, old))
	assert.Equal(t, 5, admitted(), "the old take's give-back: what it still cost, half a second; 10 at this instant in all")
	c.Advance(500 * ms)
	assert.Equal(t, 5, admitted(), "the half second earned, no more")
}

// plans is a Policy.LimitFor: a limit per key, changed while in use.
type plans struct {
	mu     sync.Mutex
	limits map[string]ratelimit.Limit
}

func (p *plans) set(key string, l ratelimit.Limit) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.limits[key] = l
}

func (p *plans) limitFor(key string) (ratelimit.Limit, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.limits[key]
	return l, ok
}

// testLimitForUpgrade: through a Limiter whose policy takes each key's
// limit from a lookup (Policy.LimitFor), a key refused under its limit is
// allowed at once when the lookup raises its burst, with the tokens the
// larger bucket has; what a store knows of the key under the old limit (a
// cached refusal) does not answer for the new one. Lowered again, the key
// has what the smaller bucket holds, and waits what it spent.
func testLimitForUpgrade(t *testing.T, c *Clock, s ratelimit.Store) {
	for _, wide := range []bool{false, true} {
		t.Run(map[bool]string{false: "alone", true: "with a wide policy"}[wide], func(t *testing.T) { limitForUpgrade(t, c, s, wide) })
	}
}

// limitForUpgrade is testLimitForUpgrade, with a second policy that never
// binds when wide (so that a BatchStore decides both in one step).
func limitForUpgrade(t *testing.T, c *Clock, s ratelimit.Store, wide bool) {
	pl := &plans{limits: map[string]ratelimit.Limit{}}
	ps := []ratelimit.Policy{{Name: "plan", Limit: fivePerSecond, LimitFor: pl.limitFor}}
	if wide {
		ps = append(ps, ratelimit.Policy{Name: "wide", Limit: ratelimit.PerSecond(1000)})
	}
	key := fmt.Sprintf("k-%v", wide)
	l := limiter(t, s, ps...)
	for range 10 {
		require.True(t, limit(t, l, key, 1).Allowed)
	}
	for range 3 {
		res := limit(t, l, key, 1)
		require.False(t, res.Allowed)
		assert.Equal(t, 200*ms, res.RetryAfter)
	}
	large := ratelimit.PerSecond(5).WithBurst(100)
	pl.set(key, large)
	res := limit(t, l, key, 1)
	require.True(t, res.Allowed, "at once under the new limit")
	assert.Equal(t, large, res.Policy.Limit)
	assert.Equal(t, int64(89), res.Remaining, "20 s of tokens, 2.2 s of them spent")
	assert.Equal(t, 2200*ms, res.ResetAfter)
	for range 89 {
		require.True(t, limit(t, l, key, 1).Allowed)
	}
	res = limit(t, l, key, 1)
	require.False(t, res.Allowed)
	assert.Equal(t, 200*ms, res.RetryAfter)

	pl.set(key, fivePerSecond)
	res = limit(t, l, key, 1)
	assert.False(t, res.Allowed)
	assert.Equal(t, fivePerSecond, res.Policy.Limit)
	assert.Equal(t, int64(0), res.Remaining)
	assert.Equal(t, 20*time.Second, res.ResetAfter, "20 s to full, as it is")
	assert.Equal(t, 18200*ms, res.RetryAfter)
	c.Advance(18200*ms - 1)
	assert.False(t, limit(t, l, key, 1).Allowed)
	c.Advance(1)
	assert.True(t, limit(t, l, key, 1).Allowed, "the wait the refusal gave holds")
}
