package failover_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/failover"
)

// In Local mode Reset forgets the bucket in both stores: a key that spent
// its local share while the primary was down starts full in each.
func TestResetBothStores(t *testing.T) {
	rig := newFailover(t, failover.Local, 2)
	s, primary, local := rig.store, rig.primary, rig.local
	p := &ratelimit.Policy{Name: "p", Limit: ratelimit.Per(10, time.Hour)}
	ctx := context.Background()
	_, err := s.Take(ctx, p, "k", 4)
	require.NoError(t, err)
	primary.down.Store(true)
	res, err := s.Take(ctx, p, "k", 5)
	require.NoError(t, err)
	require.True(t, res.Degraded)
	require.Equal(t, int64(0), res.Remaining, "the local share of 5 is spent")
	primary.down.Store(false)

	require.False(t, s.Healthy())
	require.NoError(t, s.Reset(ctx, p, "k"), "asks the primary while degraded")
	assert.True(t, s.Healthy(), "the primary answered")
	res, err = s.Take(ctx, p, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(10), res.Remaining, "primary: full")
	res, err = local.Take(ctx, &ratelimit.Policy{Name: "p", Limit: ratelimit.Per(5, time.Hour)}, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(5), res.Remaining, "local: full")
}

// A primary that fails to reset makes Reset fail with its error (the Local
// store is still reset), and the Store degraded.
func TestResetPrimaryFails(t *testing.T) {
	rig := newFailover(t, failover.Local, 2)
	s, primary, local := rig.store, rig.primary, rig.local
	p := &ratelimit.Policy{Name: "p", Limit: ratelimit.Per(10, time.Hour)}
	ctx := context.Background()
	share := &ratelimit.Policy{Name: "p", Limit: ratelimit.Per(5, time.Hour)}
	_, _ = local.Take(ctx, share, "k", 3)
	primary.down.Store(true)
	err := s.Reset(ctx, p, "k")
	assert.ErrorIs(t, err, errDown)
	assert.False(t, s.Healthy())
	res, _ := local.Take(ctx, share, "k", 0)
	assert.Equal(t, int64(5), res.Remaining, "the local store is reset anyway")
}

// takeOnly is a Store without Reset.
type takeOnly struct{ ratelimit.Store }

func TestResetStoresWithoutReset(t *testing.T) {
	p := &ratelimit.Policy{Name: "p", Limit: ratelimit.Per(10, time.Hour)}
	ctx := context.Background()

	s, err := failover.New(takeOnly{memoryStore(t, nil)}, &failover.Options{Logger: discard})
	require.NoError(t, err)
	assert.EqualError(t, s.Reset(ctx, p, "k"), "failover: Reset: the primary store, a failover_test.takeOnly, cannot forget a key (unsupported operation): it does not implement ratelimit.ResetStore")
	assert.True(t, s.Healthy(), "not a failure of the primary")

	s = newFailover(t, failover.Local, 2, takeOnly{memoryStore(t, nil)}).store
	assert.EqualError(t, s.Reset(ctx, p, "k"), "failover: Reset: the Local store, a failover_test.takeOnly, cannot forget a key (unsupported operation): it does not implement ratelimit.ResetStore")

	// Outside Local mode the Local store is unused, and not reset.
	s = newFailover(t, failover.Open, 2, takeOnly{memoryStore(t, nil)}).store
	assert.NoError(t, s.Reset(ctx, p, "k"))
}

// Closed mode: a Limiter's Reset reports the primary's failure as a store
// error.
func TestResetThroughLimiter(t *testing.T) {
	rig := newFailover(t, failover.Closed, 2)
	s, primary := rig.store, rig.primary
	l, err := ratelimit.New(s, ratelimit.Policy{Name: "p", Limit: ratelimit.Per(10, time.Hour)})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, l.Reset(ctx, "k"))
	primary.down.Store(true)
	err = l.Reset(ctx, "k")
	assert.ErrorIs(t, err, ratelimit.ErrStore)
	assert.True(t, errors.Is(err, errDown))
}
