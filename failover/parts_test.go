package failover_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/failover"
	"github.com/tokenfair/ratelimit/storetest"
)

// partedStore is a memorystore made of parts, as a Redis Cluster is of
// primaries: a key's part is its first byte, and a part in down fails.
type partedStore struct {
	inner ratelimit.Store
	mu    sync.Mutex
	down  map[string]bool
	calls map[string]int
}

func (s *partedStore) Part(_ *ratelimit.Policy, key string) string { return key[:1] }

func (s *partedStore) Take(ctx context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	s.mu.Lock()
	s.calls[key[:1]]++
	down := s.down[key[:1]]
	s.mu.Unlock()
	if down {
		return ratelimit.Result{}, errDown
	}
	return s.inner.Take(ctx, p, key, cost)
}

func (s *partedStore) setDown(part string, down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down[part] = down
}

func (s *partedStore) callsOf(part string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[part]
}

// One failing part of the primary degrades its own keys only: the keys of
// the other parts go to the primary all along, and the failing part heals
// on its own probe.
func TestFailoverParts(t *testing.T) {
	for _, mode := range []failover.Mode{failover.Open, failover.Closed, failover.Local} {
		t.Run(mode.String(), func(t *testing.T) {
			clock := new(storetest.Clock)
			primary := &partedStore{inner: memoryStore(t, clock.Now), down: map[string]bool{}, calls: map[string]int{}}
			var changes atomic.Int64
			store, err := failover.New(primary, &failover.Options{
				Mode: mode, Local: memoryStore(t, clock.Now), Logger: discard, Clock: clock.Now,
				OnHealthChange: func(bool, error) { changes.Add(1) },
			})
			require.NoError(t, err)
			l, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(1000)})
			require.NoError(t, err)
			ctx := context.Background()

			primary.setDown("a", true)
			_, err = l.Take(ctx, "a1", 1)
			if mode == failover.Closed {
				require.ErrorIs(t, err, ratelimit.ErrStore)
			} else {
				require.NoError(t, err)
			}
			assert.False(t, store.Healthy(), "a part fails")
			for i := range 50 {
				res, err := l.Take(ctx, "b"+string(rune('0'+i%10)), 1)
				require.NoError(t, err, "a key of a healthy part")
				assert.False(t, res.Degraded, "a key of a healthy part is decided by the primary")
				if mode != failover.Closed {
					res, err = l.Take(ctx, "a2", 1)
					require.NoError(t, err)
					assert.True(t, res.Degraded, "a key of the failing part falls back")
				}
			}
			assert.Equal(t, 50, primary.callsOf("b"), "every call of the healthy part reached the primary")
			assert.Equal(t, 1, primary.callsOf("a"), "the failing part is not asked again before its probe")

			primary.setDown("a", false)
			clock.Advance(250 * time.Millisecond)
			res, err := l.Take(ctx, "a3", 1)
			require.NoError(t, err)
			assert.False(t, res.Degraded, "the probe heals the part")
			assert.True(t, store.Healthy())
			assert.Equal(t, int64(2), changes.Load(), "degraded once, healthy once")
		})
	}
}

// cachedStore is a primary that answers some calls from a cache of its own
// even while its server is down, as redisstore's leases and refusal cache
// do, and tells its health only through Probe.
type cachedStore struct {
	inner  ratelimit.Store
	down   atomic.Bool
	probes atomic.Int64
}

func (s *cachedStore) Take(ctx context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	if s.down.Load() && key != "cached" {
		return ratelimit.Result{}, errDown
	}
	return s.inner.Take(ctx, p, key, cost) // "cached" answers without the server
}

func (s *cachedStore) Probe(context.Context, *ratelimit.Policy, string) error {
	s.probes.Add(1)
	if s.down.Load() {
		return errDown
	}
	return nil
}

// A probe asks a primary with Probe directly: a call that its cache
// answers while its server is down proves nothing, and never makes the
// store healthy again; a Probe that succeeds does.
func TestFailoverProbeSkipsCaches(t *testing.T) {
	clock := new(storetest.Clock)
	primary := &cachedStore{inner: memoryStore(t, clock.Now)}
	store, err := failover.New(primary, &failover.Options{Mode: failover.Closed, Logger: discard, Clock: clock.Now, ProbeInterval: time.Second})
	require.NoError(t, err)
	l, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(1000)})
	require.NoError(t, err)
	ctx := context.Background()

	primary.down.Store(true)
	_, err = l.Take(ctx, "k", 1)
	require.ErrorIs(t, err, ratelimit.ErrStore)
	require.False(t, store.Healthy())
	for range 3 {
		clock.Advance(time.Second)
		_, err = l.Take(ctx, "cached", 1) // the probe's turn: its cache would answer
		require.ErrorIs(t, err, ratelimit.ErrStore, "refused: the probe failed")
		assert.False(t, store.Healthy(), "a cached answer is no sign of health")
	}
	assert.Equal(t, int64(3), primary.probes.Load(), "one Probe a ProbeInterval")

	primary.down.Store(false)
	clock.Advance(time.Second)
	res, err := l.Take(ctx, "cached", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.True(t, store.Healthy(), "the Probe succeeded")
	_, err = l.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, int64(4), primary.probes.Load(), "no Probe while healthy")
}
