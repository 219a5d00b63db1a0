package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

// remaining returns what key has left under lim's policies, in order,
// looking without spending.
func remaining(t *testing.T, lim *ratelimit.Limiter, key string) []int64 {
	t.Helper()
	res, err := lim.Take(context.Background(), key, 0)
	require.NoError(t, err)
	if res.Results == nil {
		return []int64{res.Remaining}
	}
	var left []int64
	for _, r := range res.Results {
		left = append(left, r.Remaining)
	}
	return left
}

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
		lim, err := ratelimit.New(clockStore(t, new(fakeClock)), ratelimit.Policy{Name: "api", Limit: ratelimit.Per(10, time.Hour)})
		require.NoError(t, err)
		_, err = lim.Take(ctx, "k", 3)
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
	lim, err := ratelimit.New(clockStore(t, new(fakeClock)), ratelimit.Policy{Name: "api", Limit: ratelimit.Per(3, time.Hour)})
	require.NoError(t, err)
	_, err = lim.Take(ctx, "k", 2)
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

// With several policies, Refund gives back to each policy that spent, dry-run
// ones included.
func TestLimiterRefundPolicies(t *testing.T) {
	ctx := context.Background()
	for refund, want := range map[int64][]int64{2: {2, 5, 3}, 4: {4, 7, 5}} {
		lim, err := ratelimit.New(clockStore(t, new(fakeClock)),
			ratelimit.Policy{Name: "burst", Limit: ratelimit.PerSecond(1).WithBurst(5)},
			ratelimit.Policy{Name: "hourly", Limit: ratelimit.Per(8, time.Hour)},
			ratelimit.Policy{Name: "shadow", Limit: ratelimit.Per(6, time.Hour), DryRun: true})
		require.NoError(t, err)
		_, err = lim.Take(ctx, "k", 1)
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
	lim, err := ratelimit.New(refundFails{clockStore(t, new(fakeClock))}, p)
	require.NoError(t, err)
	took, err := lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	err = lim.Refund(ctx, "k", 1, took)
	assert.ErrorIs(t, err, ratelimit.ErrStore)
	assert.ErrorContains(t, err, "connection reset")

	type takeOnly struct{ ratelimit.Store }
	lim, err = ratelimit.New(takeOnly{clockStore(t, new(fakeClock))}, p)
	require.NoError(t, err)
	took, err = lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.NoError(t, lim.Refund(ctx, "k", 1, took))
	assert.Equal(t, []int64{2}, remaining(t, lim, "k"))
}
