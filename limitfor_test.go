package ratelimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
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

// TestLimitForBoulder8785 is letsencrypt/boulder#8785: a key exhausted
// under 10 a day is given 100 an hour. Its stored state is 24 h ahead;
// under the new limit (τ = 1 h, 36 s a token) it counts as 2τ ahead, a
// burst of debt past empty: the key waits τ + 36 s = 1h0m36s, not the day
// the old limit would make it wait, and then has one token.
func TestLimitForBoulder8785(t *testing.T) {
	var table plans
	h := newHarness(t, setup{policies: []ratelimit.Policy{{Name: "orders", Limit: ratelimit.Per(10, 24*time.Hour), LimitFor: table.limitFor}}})
	ctx := context.Background()
	res, err := h.lim.Take(ctx, "acct", 10)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	res, err = h.lim.Take(ctx, "acct", 1)
	require.NoError(t, err)
	require.False(t, res.Allowed)
	require.Equal(t, 2*time.Hour+24*time.Minute, res.RetryAfter, "the old limit's wait")

	table.set("acct", ratelimit.Per(100, time.Hour))
	res, err = h.lim.Take(ctx, "acct", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.Equal(t, time.Hour+36*time.Second, res.RetryAfter)
	assert.Equal(t, 2*time.Hour, res.ResetAfter)
	assert.Equal(t, int64(0), res.Remaining)
	assert.Equal(t, ratelimit.Per(100, time.Hour), res.Policy.Limit)

	h.clock.Advance(time.Hour + 36*time.Second - 1)
	res, err = h.lim.Take(ctx, "acct", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "a nanosecond early")
	assert.Equal(t, time.Duration(1), res.RetryAfter)
	h.clock.Advance(1)
	res, err = h.lim.Take(ctx, "acct", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "on time")
	assert.Equal(t, int64(0), res.Remaining)
	h.clock.Advance(time.Hour)
	res, err = h.lim.Take(ctx, "acct", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(100), res.Remaining, "full an hour later")
}
