package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/refusers"
)

// A Limiter of several policies reports the binding policy's result, every
// policy's result in Results, and points each Result at the limiter's own
// Policy.
func TestResultsPerPolicy(t *testing.T) {
	shadow := ratelimit.Policy{Name: "shadow", Limit: ratelimit.Per(1, time.Minute), DryRun: true}
	lim := newEngine(t, setup{policies: []ratelimit.Policy{perKey, daily, shadow}}).lim
	ps := lim.Policies()
	require.Len(t, ps, 3)
	ctx := context.Background()

	res, err := lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Same(t, &ps[0], res.Policy, "per-key has the fewest tokens left")
	assert.Equal(t, int64(9), res.Remaining)
	require.Len(t, res.Results, 3)
	for i, r := range res.Results {
		assert.Same(t, &ps[i], r.Policy, "Results()[%d]", i)
	}
	assert.Equal(t, int64(9999), res.Results[1].Remaining)
	assert.Nil(t, refusers.Names(res, false))
	assert.Nil(t, refusers.Names(res, true))

	res, err = lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, []string{"shadow"}, refusers.Names(res, true))

	res, err = lim.Take(ctx, "k", 9)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.Same(t, &ps[0], res.Policy)
	assert.Equal(t, []string{"per-key"}, refusers.Names(res, false))
	assert.Equal(t, ratelimit.PerSecond(5).WithBurst(10), res.Policy.Limit)
	assert.Equal(t, "5/s burst 10", res.Policy.Limit.String())
	assert.True(t, res.Results[1].Allowed, "daily would have allowed it")
	assert.Equal(t, int64(9998-9), res.Results[1].Remaining, "what daily would have left had the request passed")
	look, err := lim.Take(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(9998), look.Results[1].Remaining, "the refused request spent nothing from daily")
}

// The binding policy of an admitted request has the least left relative to
// its quota, whatever its unit; the first of equals.
func TestBindingByShare(t *testing.T) {
	ctx := context.Background()
	lim := meters(t)
	res, err := lim.TakeUnits(ctx, "a", map[string]int64{"tokens": 10})
	require.NoError(t, err)
	assert.Equal(t, "calls", res.Policy.Name, "9/10 = 90/100, the first of equals, before 999/1000")
	res, err = lim.TakeUnits(ctx, "b", map[string]int64{"tokens": 11})
	require.NoError(t, err)
	assert.Equal(t, "tokens", res.Policy.Name, "89/100 < 9/10")
	res, err = lim.TakeUnits(ctx, "c", map[string]int64{"content-bytes": 200})
	require.NoError(t, err)
	assert.Equal(t, "bytes", res.Policy.Name, "800/1000 < 9/10, though 800 > 9")
}
