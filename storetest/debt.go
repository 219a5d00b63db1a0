package storetest

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
)

// owing returns the policy of a charge past empty to p's buckets
// (Limiter.Settle): p with the algorithm algo.Debt.
func owing(p *ratelimit.Policy) *ratelimit.Policy {
	d := *p
	d.Algorithm = algo.Debt
	return &d
}

// testDebt: a charge past empty is always allowed and takes its cost from
// the bucket even past empty, exactly, so that the key's requests wait
// until the debt is repaid (RetryAfter says when); a cost so large that it
// overflows is the farthest debt, and a cost of 0 only looks.
func testDebt(t *testing.T, c *Clock, s ratelimit.Store) {
	p := policy("p", fivePerSecond)
	d := owing(p)
	run(t, c, s, p, []step{{cost: 4, want: allowed(6, 800*ms)}})
	run(t, c, s, d, []step{
		{cost: 3, want: allowed(3, 1400*ms)},
		{cost: 5, want: allowed(0, 2400*ms)}, // 2 tokens past empty
	})
	run(t, c, s, p, []step{{cost: 1, want: refused(0, 600*ms, 2400*ms)}})
	run(t, c, s, d, []step{
		{cost: 100, want: allowed(0, 22400*ms)}, // exactly, past a burst of debt
		{cost: 1, want: allowed(0, 22600*ms)},
		{cost: 0, want: allowed(0, 22600*ms)},
	})
	run(t, c, s, p, []step{
		{cost: 1, want: refused(0, 20800*ms, 22600*ms)},
		{advance: 20800*ms - 1, cost: 1, want: refused(0, 1, 1800*ms+1)},
		{advance: 1, cost: 1, want: allowed(0, 2*time.Second)},
	})
	far := time.Duration(math.MaxInt64 - c.Now().UnixNano())
	run(t, c, s, d, []step{
		{key: "far", cost: math.MaxInt64, want: allowed(0, far)}, // the product saturates
		{key: "far", cost: 1 << 62, want: allowed(0, far)},       // and the sum
		{key: "far", cost: math.MaxInt64 - 1, want: allowed(0, far)},
	})
	run(t, c, s, p, []step{{key: "far", cost: 1, want: refused(0, far-1800*ms, far)}})
	run(t, c, s, d, []step{{key: "new", cost: 3, want: allowed(7, 600*ms)}})
}

// testDebtCharge: Limiter.Settle of an allowed request that cost more
// than it reserved: the key's next request waits until the debt is repaid.
func testDebtCharge(t *testing.T, c *Clock, s ratelimit.Store) {
	l := limiter(t, s, ratelimit.Policy{Name: "api", Limit: fivePerSecond})
	took := limit(t, l, "k", 2)
	require.True(t, took.Allowed)
	require.NoError(t, l.Settle(context.Background(), "k", "requests", 2, 14, took))
	res := limit(t, l, "k", 1)
	assert.False(t, res.Allowed)
	assert.Equal(t, time.Second, res.RetryAfter, "2.8 s to full: one token in 1 s")
	assert.Equal(t, 2800*ms, res.ResetAfter)
	c.Advance(time.Second - 1)
	assert.False(t, limit(t, l, "k", 1).Allowed)
	c.Advance(1)
	assert.True(t, limit(t, l, "k", 1).Allowed)
}

// testQuotaDebt: a calendar quota's charge past empty refuses the key
// until the reset, and no longer: at midnight the quota is whole, whatever
// was owed.
func testQuotaDebt(t *testing.T, c *Clock, s ratelimit.Store) {
	p := policy("daily", ratelimit.Daily(5, time.UTC))
	d := owing(p)
	c.Advance(10 * time.Hour)
	run(t, c, s, d, []step{{key: "new", cost: 2, want: allowed(3, 14*time.Hour)}})
	run(t, c, s, p, []step{{cost: 5, want: allowed(0, 14*time.Hour)}})
	run(t, c, s, d, []step{
		{cost: 3, want: allowed(0, 14*time.Hour)},
		{cost: 100, want: allowed(0, 14*time.Hour)},
	})
	run(t, c, s, p, []step{
		{cost: 1, want: refused(0, 14*time.Hour, 14*time.Hour)},
		{advance: 14*time.Hour - 1, cost: 1, want: refused(0, 1, 1)},
		{advance: 1, cost: 5, want: allowed(0, 24*time.Hour)},
	})
}
