package failover_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/storetest"
)

// flakyStore is a memorystore that fails while down is set, counting calls.
type flakyStore struct {
	inner ratelimit.Store
	down  atomic.Bool
	calls atomic.Int64
}

var errDown = errors.New("connection refused")

func (f *flakyStore) Take(ctx context.Context, p ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	f.calls.Add(1)
	if f.down.Load() {
		return ratelimit.Result{}, errDown
	}
	return f.inner.Take(ctx, p, key, cost)
}

type failoverRig struct {
	clock   *storetest.Clock
	primary *flakyStore
	store   *ratelimit.Failover
	errors  atomic.Int64
	changes []bool
	mu      sync.Mutex
}

func newFailover(t *testing.T, mode ratelimit.FailureMode, instances int64) *failoverRig {
	t.Helper()
	rig := &failoverRig{clock: new(storetest.Clock)}
	inner, err := memorystore.New(memorystore.WithClock(rig.clock.Now), memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	local, err := memorystore.New(memorystore.WithClock(rig.clock.Now), memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	rig.primary = &flakyStore{inner: inner}
	rig.store, err = ratelimit.NewFailover(rig.primary, ratelimit.FailoverConfig{
		Mode:      mode,
		Local:     local,
		Instances: instances,
		OnError:   func(err error) { rig.errors.Add(1) },
		OnHealthChange: func(healthy bool, err error) {
			rig.mu.Lock()
			defer rig.mu.Unlock()
			rig.changes = append(rig.changes, healthy)
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Clock:  rig.clock.Now,
	})
	require.NoError(t, err)
	return rig
}

func TestFailoverOpen(t *testing.T) {
	rig := newFailover(t, ratelimit.FailOpen, 1)
	s := newServer(t, ratelimit.PerSecond(5).WithBurst(10), rig.store)
	s.clock = rig.clock
	w := s.get("c")
	require.Equal(t, 200, w.Code)
	assert.Equal(t, `"default";r=9;t=1`, w.Header().Get("RateLimit"), "healthy: checked")

	rig.primary.down.Store(true)
	for range 20 {
		w := s.get("c")
		require.Equal(t, 200, w.Code, "open: allowed unchecked")
		assert.Empty(t, w.Header().Get("RateLimit"), "no header fields for an unchecked decision")
	}
	assert.Equal(t, int64(2), rig.primary.calls.Load(), "after the first failure, requests skip the primary")
	assert.Equal(t, int64(1), rig.errors.Load())
	assert.False(t, rig.store.Healthy())

	rig.clock.Advance(250 * time.Millisecond)
	s.get("c")
	assert.Equal(t, int64(3), rig.primary.calls.Load(), "one probe per interval")
	s.get("c")
	assert.Equal(t, int64(3), rig.primary.calls.Load())
	assert.Equal(t, int64(2), rig.errors.Load())

	rig.primary.down.Store(false)
	rig.clock.Advance(250 * time.Millisecond)
	w = s.get("c")
	assert.True(t, rig.store.Healthy(), "the first successful probe heals")
	assert.Equal(t, `"default";r=9;t=1`, w.Header().Get("RateLimit"), "checked again")
	assert.Equal(t, []bool{false, true}, rig.changes)
}

func TestFailoverClosed(t *testing.T) {
	rig := newFailover(t, ratelimit.FailClosed, 1)
	s := newServer(t, ratelimit.PerSecond(5).WithBurst(10), rig.store)
	rig.primary.down.Store(true)
	for range 3 {
		w := s.get("c")
		require.Equal(t, http.StatusServiceUnavailable, w.Code)
		assert.Equal(t, "1", w.Header().Get("Retry-After"))
		var body map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
		assert.Equal(t, "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity", body["type"])
		assert.NotContains(t, w.Body.String(), "refused")
	}
	assert.Zero(t, s.calls)
	rig.primary.down.Store(false)
	rig.clock.Advance(time.Second)
	assert.Equal(t, 200, s.get("c").Code)
}

// TestFailoverLocal: with 2 instances sharing 5/s burst 10, each local
// fallback allows a burst of 5, refilling at 2.5/s.
func TestFailoverLocal(t *testing.T) {
	rig := newFailover(t, ratelimit.FailLocal, 2)
	s := newServer(t, ratelimit.PerSecond(5).WithBurst(10), rig.store)
	rig.primary.down.Store(true)
	var codes []int
	for range 6 {
		w := s.get("c")
		codes = append(codes, w.Code)
		assert.Empty(t, w.Header().Get("RateLimit"))
	}
	assert.Equal(t, []int{200, 200, 200, 200, 200, 429}, codes)
	rig.clock.Advance(399 * time.Millisecond)
	assert.Equal(t, 429, s.get("c").Code, "one token takes 400 ms locally")
	rig.clock.Advance(time.Millisecond)
	assert.Equal(t, 200, s.get("c").Code)
}

func TestFailoverCallerCancelIsNotAFailure(t *testing.T) {
	rig := newFailover(t, ratelimit.FailClosed, 1)
	rig.primary.down.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := rig.store.Take(ctx, ratelimit.Policy{Name: "p", Limit: ratelimit.PerSecond(1)}, "k", 1)
	assert.ErrorIs(t, err, errDown)
	assert.True(t, rig.store.Healthy())
	assert.Zero(t, rig.errors.Load())
}

func TestFailoverOneProbeAtATime(t *testing.T) {
	rig := newFailover(t, ratelimit.FailOpen, 1)
	p := ratelimit.Policy{Name: "p", Limit: ratelimit.PerSecond(1)}
	rig.primary.down.Store(true)
	_, _ = rig.store.Take(context.Background(), p, "k", 1)
	rig.clock.Advance(time.Second)
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := rig.store.Take(context.Background(), p, "k", 1)
			if err != nil || !res.Allowed || !res.Degraded {
				t.Errorf("Take = %+v, %v; want an unchecked allow", res, err)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(2), rig.primary.calls.Load(), "50 concurrent requests, one probe")
}

func TestFailoverConfigErrors(t *testing.T) {
	good := &flakyStore{}
	for name, tc := range map[string]struct {
		primary ratelimit.Store
		cfg     ratelimit.FailoverConfig
	}{
		"nil primary":         {nil, ratelimit.FailoverConfig{}},
		"local without store": {good, ratelimit.FailoverConfig{Mode: ratelimit.FailLocal}},
		"unknown mode":        {good, ratelimit.FailoverConfig{Mode: 7}},
		"negative instances":  {good, ratelimit.FailoverConfig{Instances: -1}},
		"negative probe":      {good, ratelimit.FailoverConfig{ProbeInterval: -1}},
	} {
		_, err := ratelimit.NewFailover(tc.primary, tc.cfg)
		assert.Error(t, err, name)
	}
	for _, name := range []string{"open", "closed", "local"} {
		m, err := ratelimit.ParseFailureMode(name)
		require.NoError(t, err)
		assert.Equal(t, name, m.String())
	}
	_, err := ratelimit.ParseFailureMode("sideways")
	assert.Error(t, err)
}

// notAtomic is a primary that can never decide several policies at once,
// like a Redis Cluster whose keys live in different slots.
type notAtomic struct{ *flakyStore }

func (notAtomic) TakeAll(context.Context, []ratelimit.Request, []ratelimit.Result) error {
	return ratelimit.ErrNotAtomic
}

// TestFailoverRecoversWithoutBatches: a probe that finds the primary cannot
// batch does not stop the one-by-one takes from probing and recovering.
func TestFailoverRecoversWithoutBatches(t *testing.T) {
	rig := newFailover(t, ratelimit.FailOpen, 1)
	fo, err := ratelimit.NewFailover(notAtomic{rig.primary}, ratelimit.FailoverConfig{Clock: rig.clock.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	lim, err := ratelimit.New(fo, perKey, global)
	require.NoError(t, err)
	rig.primary.down.Store(true)
	res, err := lim.Take(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Degraded)
	rig.primary.down.Store(false)
	rig.clock.Advance(time.Second)
	res, err = lim.Take(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Degraded, "healthy again at the first probe")
	assert.True(t, fo.Healthy())
}

// TestFailoverLocalCostAboveShare: a cost the shared limit allows is not
// refused for ever by an instance's smaller share.
func TestFailoverLocalCostAboveShare(t *testing.T) {
	rig := newFailover(t, ratelimit.FailLocal, 3)
	lim, err := ratelimit.New(rig.store, ratelimit.Policy{Limit: ratelimit.PerSecond(10)})
	require.NoError(t, err)
	rig.primary.down.Store(true)
	res, err := lim.Take(context.Background(), "k", 5)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "burst 10 shared by 3 is 3, raised to the cost of 5")
	res, err = lim.Take(context.Background(), "k", 5)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.Equal(t, 5*300*time.Millisecond, res.RetryAfter, "at a third of the rate")
}

type dryRunDown struct{ ratelimit.Store }

func (d dryRunDown) Take(ctx context.Context, p ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	if p.DryRun {
		return ratelimit.Result{}, errDown
	}
	return d.Store.Take(ctx, p, key, cost)
}

// TestDryRunStoreError: a failing dry-run policy neither refuses nor makes
// the enforcing policies lose tokens.
func TestDryRunStoreError(t *testing.T) {
	shadow := ratelimit.Policy{Name: "shadow", Limit: ratelimit.PerMinute(1), DryRun: true}
	lim, err := ratelimit.New(dryRunDown{memoryStore(t)}, ratelimit.Policy{Limit: ratelimit.PerMinute(2)}, shadow)
	require.NoError(t, err)
	for i := range 2 {
		res, err := lim.Take(context.Background(), "k", 1)
		require.NoError(t, err)
		assert.True(t, res.Allowed, "request %d", i+1)
		assert.Empty(t, res.DryRunViolated())
	}
	res, err := lim.Take(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "the enforcing policy counted both")
}
