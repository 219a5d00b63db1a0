package failover_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/failover"
	"github.com/tokenfair/ratelimit/internal/algo"
	"github.com/tokenfair/ratelimit/internal/refusers"
	"github.com/tokenfair/ratelimit/internal/storeerr"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/storetest"
)

// flakyStore is a memorystore that fails while down is set, counting calls.
// It can also forget a key (ratelimit.ResetStore), but decides no batch.
type flakyStore struct {
	inner ratelimit.Store
	down  atomic.Bool
	calls atomic.Int64
	stall atomic.Pointer[chan struct{}] // if set, a Take waits until it is closed: a slow primary
}

var errDown = errors.New("connection refused")

// errPoisoned is the primary's answer for the key "poisoned", whose state
// another application overwrote.
var errPoisoned = fmt.Errorf("%w: WRONGTYPE", storeerr.ErrKeyState)

func (f *flakyStore) Refund(ctx context.Context, p *ratelimit.Policy, key string, cost int64, took ratelimit.Result) error {
	f.calls.Add(1)
	if f.down.Load() {
		return errDown
	}
	return f.inner.(ratelimit.RefundStore).Refund(ctx, p, key, cost, took)
}

func (f *flakyStore) Reset(ctx context.Context, p *ratelimit.Policy, key string) error {
	f.calls.Add(1)
	if f.down.Load() {
		return errDown
	}
	return f.inner.(ratelimit.ResetStore).Reset(ctx, p, key)
}

func (f *flakyStore) Take(ctx context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	f.calls.Add(1)
	if stall := f.stall.Load(); stall != nil {
		<-*stall
	}
	if f.down.Load() {
		return ratelimit.Result{}, errDown
	}
	if err := ctx.Err(); err != nil { // as a network store does: no I/O
		return ratelimit.Result{}, err
	}
	if key == "poisoned" {
		return ratelimit.Result{}, errPoisoned
	}
	return f.inner.Take(ctx, p, key, cost)
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var discard = slog.New(slog.DiscardHandler)

func memoryStore(t *testing.T, clock func() time.Time) *memorystore.Store {
	t.Helper()
	s, err := memorystore.New(&memorystore.Options{Clock: clock})
	require.NoError(t, err)
	return s
}

// failoverRig is what the tests build: a failover.Store over a flaky
// primary, with its Local store, on a fake clock, and what the Store's
// hooks reported.
type failoverRig struct {
	clock   *storetest.Clock
	primary *flakyStore
	local   ratelimit.Store
	store   *failover.Store
	errors  atomic.Int64
	changes []bool
	mu      sync.Mutex
}

// newFailover returns a rig whose Store decides in mode, for instances,
// while its primary fails. The primary is a memorystore on the rig's
// clock, and so is the Local store unless local gives one.
func newFailover(t *testing.T, mode failover.Mode, instances int64, local ...ratelimit.Store) *failoverRig {
	t.Helper()
	rig := &failoverRig{clock: new(storetest.Clock)}
	rig.primary = &flakyStore{inner: memoryStore(t, rig.clock.Now)}
	rig.local = memoryStore(t, rig.clock.Now)
	if len(local) > 0 {
		rig.local = local[0]
	}
	var err error
	rig.store, err = failover.New(rig.primary, &failover.Options{
		Mode:      mode,
		Local:     rig.local,
		Instances: instances,
		OnError:   func(err error) { rig.errors.Add(1) },
		OnHealthChange: func(healthy bool, err error) {
			rig.mu.Lock()
			defer rig.mu.Unlock()
			rig.changes = append(rig.changes, healthy)
		},
		Logger: discard,
		Clock:  rig.clock.Now,
	})
	require.NoError(t, err)
	return rig
}

// server is a handler behind the middleware of a limiter of one policy,
// keyed by the X-Client header.
type server struct {
	t     *testing.T
	mw    *ratelimit.Middleware
	calls int
}

// serve returns a server whose limiter of one policy, of limit l, decides
// in the rig's Store.
func (rig *failoverRig) serve(t *testing.T, l ratelimit.Limit) *server {
	t.Helper()
	lim, err := ratelimit.New(rig.store, ratelimit.Policy{Limit: l})
	require.NoError(t, err)
	byClient := func(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }
	mw, err := ratelimit.NewMiddleware(lim, byClient, &ratelimit.MiddlewareOptions{Logger: discard})
	require.NoError(t, err)
	return &server{t: t, mw: mw}
}

// field returns the first value of the header field name spelled exactly
// so, or "": the rate-limit fields go out as the drafts spell them
// ("RateLimit"), which h.Get, canonicalising to "Ratelimit", does not find.
func field(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (s *server) get(client string) *httptest.ResponseRecorder {
	s.t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/geocode?q=paris", nil)
	r.Header.Set("X-Client", client)
	w := httptest.NewRecorder()
	s.mw.Handle(w, r, func(*http.Request) (int, int64) {
		s.calls++
		w.Write([]byte("ok"))
		return http.StatusOK, 2
	})
	return w
}

// TestConformance runs the suite through a healthy failover.Store.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		s, err := failover.New(memoryStore(t, now), &failover.Options{Mode: failover.Local, Local: memoryStore(t, now), Logger: discard})
		require.NoError(t, err)
		return s
	})
}

func TestFailoverOpen(t *testing.T) {
	rig := newFailover(t, failover.Open, 1)
	s := rig.serve(t, ratelimit.PerSecond(5).WithBurst(10))
	w := s.get("c")
	require.Equal(t, 200, w.Code)
	assert.Equal(t, `"default";r=9;t=1`, field(w.Header(), "RateLimit"), "healthy: checked")

	rig.primary.down.Store(true)
	for range 20 {
		w := s.get("c")
		require.Equal(t, 200, w.Code, "open: allowed unchecked")
		assert.Empty(t, field(w.Header(), "RateLimit"), "no header fields for an unchecked decision")
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
	assert.Equal(t, `"default";r=9;t=1`, field(w.Header(), "RateLimit"), "checked again")
	assert.Equal(t, []bool{false, true}, rig.changes)
}

func TestFailoverClosed(t *testing.T) {
	rig := newFailover(t, failover.Closed, 1)
	s := rig.serve(t, ratelimit.PerSecond(5).WithBurst(10))
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

// TestFailoverClosedErrors: a refusal while failing closed wraps
// ratelimit.ErrStore, with the primary's error when it was asked and
// without it when it was skipped.
func TestFailoverClosedErrors(t *testing.T) {
	rig := newFailover(t, failover.Closed, 1)
	p := &ratelimit.Policy{Name: "p", Limit: ratelimit.PerSecond(1)}
	rig.primary.down.Store(true)
	_, err := rig.store.Take(context.Background(), p, "k", 1)
	assert.ErrorIs(t, err, ratelimit.ErrStore)
	assert.ErrorIs(t, err, errDown, "the primary was asked")
	_, err = rig.store.Take(context.Background(), p, "k", 1)
	assert.ErrorIs(t, err, ratelimit.ErrStore)
	assert.NotErrorIs(t, err, errDown, "the primary was skipped")
	assert.Equal(t, int64(1), rig.primary.calls.Load())
}

// TestFailoverLocal: with 2 instances sharing 5/s burst 10, each local
// fallback allows a burst of 5, refilling at 2.5/s, and its answers carry
// the header fields of that share: what the client may really use.
func TestFailoverLocal(t *testing.T) {
	rig := newFailover(t, failover.Local, 2)
	s := rig.serve(t, ratelimit.PerSecond(5).WithBurst(10))
	rig.primary.down.Store(true)
	var codes []int
	var fields []string
	for range 6 {
		w := s.get("c")
		codes = append(codes, w.Code)
		fields = append(fields, field(w.Header(), "RateLimit"))
		assert.Equal(t, `"default";q=5;w=2`, field(w.Header(), "RateLimit-Policy"), "the share: 5 tokens, earned in 2 s")
	}
	assert.Equal(t, []int{200, 200, 200, 200, 200, 429}, codes)
	assert.Equal(t, []string{`"default";r=4;t=1`, `"default";r=3;t=1`, `"default";r=2;t=1`, `"default";r=1;t=1`,
		`"default";r=0;t=1`, `"default";r=0;t=1`}, fields)
	rig.clock.Advance(399 * time.Millisecond)
	w := s.get("c")
	assert.Equal(t, 429, w.Code, "one token takes 400 ms locally")
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	rig.clock.Advance(time.Millisecond)
	w = s.get("c")
	assert.Equal(t, 200, w.Code)
	assert.Equal(t, `"default";r=0;t=1`, field(w.Header(), "RateLimit"))
}

func TestFailoverCallerCancelIsNotAFailure(t *testing.T) {
	rig := newFailover(t, failover.Closed, 1)
	rig.primary.down.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := rig.store.Take(ctx, &ratelimit.Policy{Name: "p", Limit: ratelimit.PerSecond(1)}, "k", 1)
	assert.ErrorIs(t, err, errDown)
	assert.True(t, rig.store.Healthy())
	assert.Zero(t, rig.errors.Load())
}

func TestFailoverOneProbeAtATime(t *testing.T) {
	rig := newFailover(t, failover.Open, 1)
	p := &ratelimit.Policy{Name: "p", Limit: ratelimit.PerSecond(1)}
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
		opts    *failover.Options
	}{
		"nil primary":         {nil, nil},
		"local without store": {good, &failover.Options{Mode: failover.Local}},
		"unknown mode":        {good, &failover.Options{Mode: 7}},
		"negative instances":  {good, &failover.Options{Instances: -1}},
		"negative probe":      {good, &failover.Options{ProbeInterval: -1}},
	} {
		_, err := failover.New(tc.primary, tc.opts)
		assert.Error(t, err, name)
	}
	_, err := failover.New(good, nil)
	assert.NoError(t, err, "nil options: the defaults")
}

func TestModeText(t *testing.T) {
	for _, name := range []string{"open", "closed", "local"} {
		var m failover.Mode
		require.NoError(t, m.UnmarshalText([]byte(name)))
		assert.Equal(t, name, m.String())
		text, err := m.MarshalText()
		require.NoError(t, err)
		assert.Equal(t, name, string(text))
	}
	m := failover.Closed
	assert.Error(t, m.UnmarshalText([]byte("sideways")))
	assert.Equal(t, failover.Closed, m, "a failed UnmarshalText leaves the mode alone")
	assert.Equal(t, "Mode(7)", failover.Mode(7).String())
	_, err := failover.Mode(7).MarshalText()
	assert.Error(t, err)
}

var (
	perKey = ratelimit.Policy{Name: "per-key", Limit: ratelimit.PerSecond(5).WithBurst(10)}
	global = ratelimit.Policy{Name: "global", Limit: ratelimit.PerSecond(200).WithBurst(4), Global: true}
)

// notAtomic is a primary that can never decide several policies at once,
// like a Redis Cluster whose keys live in different slots.
type notAtomic struct{ *flakyStore }

func (notAtomic) TakeAll(context.Context, []ratelimit.BatchItem, []ratelimit.Result) error {
	return errors.ErrUnsupported
}

// TestFailoverRecoversWithoutBatches: a probe that finds the primary cannot
// batch does not stop the one-by-one takes from probing and recovering.
func TestFailoverRecoversWithoutBatches(t *testing.T) {
	rig := newFailover(t, failover.Open, 1)
	fo, err := failover.New(notAtomic{rig.primary}, &failover.Options{Clock: rig.clock.Now, Logger: discard})
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

// TestFailoverLocalRefusalSpendsNothing: while degraded in Local mode, a
// request that one policy refuses spends nothing from the others, even
// when the primary cannot decide several policies at once: the Local
// store does. (Without it, a client's refused flood would drain a global
// policy's local bucket for everybody.)
func TestFailoverLocalRefusalSpendsNothing(t *testing.T) {
	rig := newFailover(t, failover.Local, 1)
	lim, err := ratelimit.New(rig.store,
		ratelimit.Policy{Name: "a", Limit: ratelimit.Per(10, time.Minute)},
		ratelimit.Policy{Name: "b", Limit: ratelimit.Per(1, time.Minute)})
	require.NoError(t, err)
	rig.primary.down.Store(true)
	ctx := context.Background()
	res, err := lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.True(t, res.Degraded)
	for range 4 {
		res, err = lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		require.Equal(t, []string{"b"}, refusers.Names(res, false))
	}
	look, err := lim.Take(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(9), look.Results[0].Remaining, "a lost nothing to the refusals")
}

// TestFailoverLocalCostAboveShare: a cost the shared limit allows is not
// refused for ever by an instance's smaller share.
func TestFailoverLocalCostAboveShare(t *testing.T) {
	rig := newFailover(t, failover.Local, 3)
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

// TestFailoverLocalQuotaShare: while degraded, a calendar quota is shared
// by its count: 10 a day among 3 instances is 3 a day each, refused until
// midnight; a charge past empty takes its whole cost from the share, at
// the share's rate.
func TestFailoverLocalQuotaShare(t *testing.T) {
	rig := newFailover(t, failover.Local, 3)
	daily := &ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(10, time.UTC)}
	rate := &ratelimit.Policy{Name: "rate", Limit: ratelimit.PerSecond(10)}
	rig.primary.down.Store(true)
	rig.clock.Advance(18 * time.Hour)
	ctx := context.Background()
	take := func(p *ratelimit.Policy, cost int64) ratelimit.Result {
		t.Helper()
		res, err := rig.store.Take(ctx, p, "k", cost)
		require.NoError(t, err)
		require.True(t, res.Degraded)
		return res
	}
	for range 3 {
		require.True(t, take(daily, 1).Allowed)
	}
	res := take(daily, 1)
	assert.False(t, res.Allowed)
	assert.Equal(t, 6*time.Hour, res.RetryAfter)
	assert.True(t, res.Local)
	assert.Equal(t, "daily", res.Policy.Name, "decided by the share, named as the policy: a Limiter charges it")
	assert.Equal(t, ratelimit.Daily(10, time.UTC).WithBurst(3), res.Policy.Limit, "the share's limit")

	debt := *rate
	debt.Algorithm = algo.Debt
	res = take(&debt, 1000)
	assert.True(t, res.Allowed)
	assert.Equal(t, 1000*300*time.Millisecond, res.ResetAfter, "1000 tokens at a third of the rate")
}

// TestFailoverLocalShareReused: while degraded, Local decides with one
// share policy per policy, made once: a decision of a cost up to the
// share's burst allocates nothing.
func TestFailoverLocalShareReused(t *testing.T) {
	rig := newFailover(t, failover.Local, 4)
	p := &ratelimit.Policy{Name: "p", Limit: ratelimit.PerSecond(100).WithBurst(40)}
	rig.primary.down.Store(true)
	ctx := context.Background()
	first, err := rig.store.Take(ctx, p, "k", 1)
	require.NoError(t, err)
	require.True(t, first.Degraded)
	require.True(t, first.Local)
	require.Equal(t, int64(10), first.Policy.Limit.Burst(), "decided by the share, the Result is the share's")
	require.Equal(t, int64(9), first.Remaining, "decided by the share: a burst of 40 / 4")
	for _, cost := range []int64{1, 10} {
		var res ratelimit.Result
		allocs := testing.AllocsPerRun(100, func() {
			res, err = rig.store.Take(ctx, p, "k", cost)
		})
		require.NoError(t, err)
		assert.Zero(t, allocs, "allocations per degraded decision of cost %d", cost)
		assert.True(t, res.Degraded)
		assert.Same(t, first.Policy, res.Policy, "one share, made once")
	}
	assert.Equal(t, int64(1), rig.primary.calls.Load(), "no probe: the clock stood still")
}

// TestFailoverLocalShareIsExact: each of N instances decides exactly as a
// policy of 1/N of the rate (N times the interval) and 1/N of the burst
// and of Immediate would, on random traces, for every algorithm; MaxDelay
// stays, within the share's span.
func TestFailoverLocalShareIsExact(t *testing.T) {
	for _, tc := range []struct {
		n         int64
		policy    ratelimit.Policy
		burst     int64 // the share's
		immediate int64 // the share's
	}{
		{n: 2, policy: ratelimit.Policy{Name: "a", Limit: ratelimit.PerSecond(5).WithBurst(10)}, burst: 5},
		{n: 4, policy: ratelimit.Policy{Name: "b", Limit: ratelimit.PerSecond(100).WithBurst(40)}, burst: 10},
		{n: 3, policy: ratelimit.Policy{Name: "c", Limit: ratelimit.Per(90, time.Minute), Algorithm: ratelimit.LeakyPolice}, burst: 30},
		{n: 3, policy: ratelimit.Policy{Name: "d", Limit: ratelimit.PerSecond(20), Algorithm: ratelimit.LeakyShape}, burst: 6},
		{n: 2, policy: ratelimit.Policy{Name: "e", Limit: ratelimit.PerSecond(12), Algorithm: ratelimit.LeakyShape, Immediate: 8, MaxDelay: 500 * time.Millisecond}, burst: 6, immediate: 4},
		{n: 3, policy: ratelimit.Policy{Name: "f", Limit: ratelimit.PerSecond(10), Algorithm: ratelimit.LeakyShape, Immediate: 10, MaxDelay: time.Second}, burst: 3, immediate: 3},
	} {
		t.Run(tc.policy.Name, func(t *testing.T) {
			rig := newFailover(t, failover.Local, tc.n)
			rig.primary.down.Store(true)
			p := &tc.policy
			share := tc.policy
			share.Limit = ratelimit.Per(1, time.Duration(tc.n)*p.Limit.Interval()).WithBurst(tc.burst)
			share.Immediate = tc.immediate
			share.MaxDelay = min(p.MaxDelay, time.Duration(tc.burst)*share.Limit.Interval()) // the share's span at most
			_, err := ratelimit.New(rig.primary, share)
			require.NoError(t, err, "the share is a valid policy")

			iv := int64(share.Limit.Interval())
			rng := rand.New(rand.NewPCG(uint64(tc.n), 11))
			var state int64
			for i := range 2000 {
				rig.clock.Advance(time.Duration(rng.Int64N(3) * iv / 2 * rng.Int64N(2)))
				cost := rng.Int64N(tc.burst + 1)
				got, err := rig.store.Take(context.Background(), p, "k", cost)
				require.NoError(t, err)
				want, next := share.Decide(state, rig.clock.Now().UnixNano(), cost)
				want.Degraded, want.Local = true, true
				require.NotNil(t, got.Policy)
				assert.Equal(t, share.Name, got.Policy.Name, "the share keeps the policy's name")
				assert.Equal(t, share.Limit, got.Policy.Limit, "the share's Result")
				assert.Equal(t, share.Immediate, got.Policy.Immediate)
				got.Policy, want.Policy = nil, nil
				require.Equal(t, want, got, "decision %d: Take(cost %d) at %v", i, cost, rig.clock.Now())
				state = next
			}
		})
	}
}

type dryRunDown struct{ ratelimit.Store }

func (d dryRunDown) Take(ctx context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	if p.DryRun {
		return ratelimit.Result{}, errDown
	}
	return d.Store.Take(ctx, p, key, cost)
}

// TestDryRunStoreError: a failing dry-run policy neither refuses nor makes
// the enforcing policies lose tokens.
func TestDryRunStoreError(t *testing.T) {
	shadow := ratelimit.Policy{Name: "shadow", Limit: ratelimit.Per(1, time.Minute), DryRun: true}
	lim, err := ratelimit.New(dryRunDown{memoryStore(t, nil)}, ratelimit.Policy{Limit: ratelimit.Per(2, time.Minute)}, shadow)
	require.NoError(t, err)
	for i := range 2 {
		res, err := lim.Take(context.Background(), "k", 1)
		require.NoError(t, err)
		assert.True(t, res.Allowed, "request %d", i+1)
		assert.Empty(t, refusers.Names(res, true))
	}
	res, err := lim.Take(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "the enforcing policy counted both")
}

// TestFailoverSlowProbesDoNotOverlap: while a probe waits on a slow
// primary, no other request probes, however many intervals go by, up to
// the bound at which it is taken to hang; the next probe is an interval
// after the last one ended. (Before, a primary that took a second to fail
// had four probes of 250 ms in flight at once.)
func TestFailoverSlowProbesDoNotOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rig := newFailover(t, failover.Open, 1)
		p := &ratelimit.Policy{Name: "p", Limit: ratelimit.PerSecond(1)}
		take := func() {
			res, err := rig.store.Take(context.Background(), p, "k", 1)
			assert.True(t, err == nil && res.Allowed && res.Degraded, "Take = %+v, %v; want an unchecked allow", res, err)
		}
		rig.primary.down.Store(true)
		_, _ = rig.store.Take(context.Background(), p, "k", 1) // degrades
		slow := make(chan struct{})
		rig.primary.stall.Store(&slow)
		rig.clock.Advance(250 * time.Millisecond)
		go take() // the probe, which waits on the primary
		synctest.Wait()
		require.Equal(t, int64(2), rig.primary.calls.Load())
		for range 7 {
			rig.clock.Advance(250 * time.Millisecond)
			take()
		}
		assert.Equal(t, int64(2), rig.primary.calls.Load(), "no probe while one is in flight, for 7 intervals")
		rig.clock.Advance(250 * time.Millisecond)
		go take() // 8 intervals: the first probe is taken to hang
		synctest.Wait()
		assert.Equal(t, int64(3), rig.primary.calls.Load(), "a probe after the bound")

		rig.primary.stall.Store(nil)
		close(slow) // both probes find the primary down
		synctest.Wait()
		take()
		rig.clock.Advance(249 * time.Millisecond)
		take()
		assert.Equal(t, int64(3), rig.primary.calls.Load(), "no probe until an interval after the last ended")
		rig.clock.Advance(time.Millisecond)
		take()
		assert.Equal(t, int64(4), rig.primary.calls.Load())
	})
}

// TestFailoverRecoversDespiteCanceledProbes: once the primary is back, a
// request whose context has ended that takes the probe learns nothing and
// hands the probe on, so the next request probes and heals, in every mode.
// (Before, each such request used up the probe of its interval: a client
// sending one with each request kept the store degraded for ever.)
func TestFailoverRecoversDespiteCanceledProbes(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, mode := range []failover.Mode{failover.Open, failover.Closed, failover.Local} {
		t.Run(mode.String(), func(t *testing.T) {
			rig := newFailover(t, mode, 1)
			lim, err := ratelimit.New(rig.store, ratelimit.Policy{Limit: ratelimit.Per(1, time.Minute)})
			require.NoError(t, err)
			rig.primary.down.Store(true)
			_, _ = lim.Take(context.Background(), "c", 1)
			require.False(t, rig.store.Healthy())
			rig.primary.down.Store(false)

			checked := 0 // decisions taken by the primary
			for range 200 {
				rig.clock.Advance(250 * time.Millisecond) // a probe is due
				_, err := lim.Take(canceled, "c", 1)
				assert.ErrorIs(t, err, context.Canceled)
				if res, err := lim.Take(context.Background(), "c", 1); err == nil && !res.Degraded {
					checked++
				}
			}
			assert.Equal(t, 200, checked, "decisions taken by the primary, of 200")
			assert.True(t, rig.store.Healthy())
			assert.Equal(t, []bool{false, true}, rig.changes)
		})
	}
}

// TestFailoverCanceledProbeWhileDown: a canceled probe hands the probe on
// while the primary is still down too; the next request's probe finds it
// down and the schedule goes on from there: one probe per interval.
func TestFailoverCanceledProbeWhileDown(t *testing.T) {
	rig := newFailover(t, failover.Open, 1)
	p := &ratelimit.Policy{Name: "p", Limit: ratelimit.PerSecond(1)}
	rig.primary.down.Store(true)
	_, _ = rig.store.Take(context.Background(), p, "k", 1)
	rig.clock.Advance(250 * time.Millisecond)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := rig.store.Take(canceled, p, "k", 1)
	assert.ErrorIs(t, err, errDown, "the probe went to the primary")
	assert.Equal(t, int64(2), rig.primary.calls.Load())
	for range 3 {
		_, _ = rig.store.Take(context.Background(), p, "k", 1)
	}
	assert.Equal(t, int64(3), rig.primary.calls.Load(), "the next request probed, and the others did not")
	assert.Equal(t, int64(2), rig.errors.Load(), "the canceled probe's error is not the primary's")
}

// TestFailoverKeyStateIsNoFailure: an error about one key's state is
// returned to that key's request, and the store stays healthy, so every
// other key is still decided by the primary, in every mode; a probe that
// meets it heals, since the primary answered. (Before, one poisoned key
// degraded the store: in Open mode 20 of 20 requests passed a 1/min limit.)
func TestFailoverKeyStateIsNoFailure(t *testing.T) {
	for _, mode := range []failover.Mode{failover.Open, failover.Closed, failover.Local} {
		t.Run(mode.String(), func(t *testing.T) {
			rig := newFailover(t, mode, 1)
			lim, err := ratelimit.New(rig.store, ratelimit.Policy{Limit: ratelimit.Per(1, time.Minute)})
			require.NoError(t, err)
			ctx := context.Background()
			admitted, failed, checked := 0, 0, 0
			for range 20 {
				if _, err := lim.Take(ctx, "poisoned", 1); errors.Is(err, storeerr.ErrKeyState) && errors.Is(err, ratelimit.ErrStore) {
					failed++ // 503
				}
				res, err := lim.Take(ctx, "c", 1)
				if err == nil && res.Allowed {
					admitted++
				}
				if err == nil && !res.Degraded {
					checked++
				}
			}
			assert.Equal(t, 20, failed, "poisoned requests failed with ErrKeyState, of 20")
			assert.Equal(t, 20, checked, "other requests decided by the primary, of 20")
			assert.Equal(t, 1, admitted, "other requests admitted through a 1/min limit, of 20")
			assert.True(t, rig.store.Healthy())
			assert.Empty(t, rig.changes)
			assert.Equal(t, int64(20), rig.errors.Load(), "OnError saw each")

			rig.primary.down.Store(true)
			_, _ = lim.Take(ctx, "c", 1)
			require.False(t, rig.store.Healthy())
			rig.primary.down.Store(false)
			rig.clock.Advance(time.Second)
			_, err = lim.Take(ctx, "poisoned", 1)
			assert.ErrorIs(t, err, storeerr.ErrKeyState)
			assert.True(t, rig.store.Healthy(), "the primary answered the probe")
		})
	}
}

// TestFailoverGiveBackWhileDegraded: a give-back (Refund) made
// while the primary fails, of tokens a healthy decision spent in the
// primary, does nothing, in the Local store as in the primary: the tokens
// stay spent. (Before, Local mode gave them to the Local store, which had
// never spent them: two give-backs there admitted 2 more requests of 2.)
func TestFailoverGiveBackWhileDegraded(t *testing.T) {
	for _, mode := range []failover.Mode{failover.Open, failover.Closed, failover.Local} {
		t.Run(mode.String(), func(t *testing.T) {
			rig := newFailover(t, mode, 1)
			p := &ratelimit.Policy{Name: "p", Limit: ratelimit.Per(2, time.Minute)}
			ctx := context.Background()
			var took []ratelimit.Result
			for range 2 { // decided by the primary
				res, err := rig.store.Take(ctx, p, "k", 1)
				require.NoError(t, err)
				require.True(t, res.Allowed)
				took = append(took, res)
			}
			rig.primary.down.Store(true)
			if mode == failover.Local { // the Local bucket is spent too
				for range 2 {
					res, _ := rig.store.Take(ctx, p, "k", 1)
					require.True(t, res.Allowed)
				}
			}
			_, _ = rig.store.Take(ctx, p, "k", 1)
			require.False(t, rig.store.Healthy())
			for _, r := range took { // the two requests of the primary did not count
				require.NoError(t, rig.store.Refund(ctx, p, "k", 1, r))
			}
			if mode == failover.Local {
				admitted := 0
				for range 2 {
					if res, err := rig.store.Take(ctx, p, "k", 1); err == nil && res.Allowed {
						admitted++
					}
				}
				assert.Zero(t, admitted, "admitted locally after 2 give-backs, of 2")
			}
			rig.primary.down.Store(false)
			rig.clock.Advance(time.Second)
			res, err := rig.store.Take(ctx, p, "k", 0)
			require.NoError(t, err)
			require.True(t, rig.store.Healthy())
			assert.Equal(t, int64(0), res.Remaining, "the primary's tokens stayed spent")
		})
	}
}

// TestFailoverLocalPenaltyBox: while degraded in Local mode, refusals
// still count strikes and ban, in the Local store, with the Penalty
// undivided by Instances. (Before, every degraded result skipped the
// penalty box: 1000 requests in 10 s under Penalty{After: 1, For: 1h}
// were 948 refusals, 0 bans and 52 admissions.)
func TestFailoverLocalPenaltyBox(t *testing.T) {
	rig := newFailover(t, failover.Local, 2)
	lim, err := ratelimit.New(rig.store, ratelimit.Policy{Limit: ratelimit.PerSecond(10).WithBurst(10),
		Penalty: ratelimit.Penalty{After: 1, For: time.Hour}})
	require.NoError(t, err)
	rig.primary.down.Store(true)
	ctx := context.Background()
	admitted, refused, bans := 0, 0, 0
	var first ratelimit.Result // the first refusal: the ban's
	for range 1000 {
		res, err := lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		rig.clock.Advance(10 * time.Millisecond)
		switch {
		case res.Allowed:
			admitted++
			continue
		case refused == 0:
			first = res
		}
		refused++
		if slices.Equal([]string{"default/ban"}, refusers.Names(res, false)) {
			bans++
		}
	}
	assert.Equal(t, 5, admitted, "a share of burst 5, then banned")
	assert.Equal(t, 995, refused)
	assert.Equal(t, 995, bans, "refusals by the ban")
	assert.Equal(t, []string{"default/ban"}, refusers.Names(first, false), "the refusal that bans is the ban's")
	assert.Equal(t, time.Hour, first.RetryAfter, "the ban's whole length, not a share of it")
	assert.False(t, rig.store.Healthy())
}

// TestFailoverLocalPenaltyUndivided: in Local mode a penalty box's strikes
// and bans are not divided among the instances as quotas are: a key is
// banned at its Penalty.After-th local refusal, and a first ban lasts
// Penalty.For, also with a back-off (whose memory of bans, divided, would
// make a first ban the longest).
func TestFailoverLocalPenaltyUndivided(t *testing.T) {
	rig := newFailover(t, failover.Local, 4)
	lim, err := ratelimit.New(rig.store, ratelimit.Policy{Limit: ratelimit.Per(4, time.Minute).WithBurst(4),
		Penalty: ratelimit.Penalty{After: 3, Within: time.Hour, For: time.Minute, Max: 4 * time.Minute}})
	require.NoError(t, err)
	rig.primary.down.Store(true)
	ctx := context.Background()
	res, err := lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, res.Allowed, "a share of burst 1")
	for i := range 2 {
		res, err = lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		require.Equal(t, []string{"default"}, refusers.Names(res, false), "refusal %d: no ban yet", i+1)
	}
	res, err = lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"default/ban"}, refusers.Names(res, false), "the third refusal bans")
	assert.Equal(t, time.Minute, res.RetryAfter, "a first ban lasts Penalty.For")
}

// TestFailoverSettledCosts: a settled cost (Limiter.Settle of a degraded
// Result) is charged to the Local share while degraded, so that 30
// responses of 10 000 bytes under a 1 000-byte budget are not 30 × 1 byte;
// Open charges nothing (it limits nothing); Closed admitted nothing.
func TestFailoverSettledCosts(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		mode      failover.Mode
		instances int64
	}{{failover.Local, 1}, {failover.Local, 3}, {failover.Open, 1}} {
		mode := tc.mode
		rig := newFailover(t, mode, tc.instances)
		rig.primary.down.Store(true)
		lim, err := ratelimit.New(rig.store, ratelimit.Policy{Name: "bytes", Limit: ratelimit.Per(1000, time.Minute)})
		require.NoError(t, err)
		admitted := 0
		for range 30 {
			res, err := lim.Take(ctx, "k", 1)
			require.NoError(t, err)
			require.True(t, res.Degraded, "%v: decided while the primary is down", mode)
			if !res.Allowed {
				continue
			}
			admitted++
			require.NoError(t, lim.Settle(ctx, "k", "requests", 1, 10_000, res), "%v", mode)
		}
		want := map[failover.Mode]int{failover.Local: 1, failover.Open: 30}[mode]
		assert.Equal(t, want, admitted, "%v, %d instances: responses of 10 000 bytes under 1 000 bytes a minute", mode, tc.instances)
		if mode == failover.Local {
			res, err := lim.Take(ctx, "k", 1)
			require.NoError(t, err)
			// the share: 1/n of the rate, 1/n of the burst
			n := time.Duration(tc.instances)
			want := 10_000*60*n*time.Millisecond - 1000/n*60*n*time.Millisecond + 60*n*time.Millisecond
			assert.Equal(t, want, res.RetryAfter, "%d instances: 10 000 bytes at the share's rate, less its burst, and the next byte", tc.instances)
		}
	}
}

// TestModelLocal runs the give-back tests and the model test (that nothing
// passes the limit) on a Store whose primary is down: Local decides every
// request, gives nothing back, and charges settled costs to the share.
// (A reset goes to the primary, down: the tests see no ResetStore.)
func TestModelLocal(t *testing.T) {
	for _, n := range []int64{1, 3} {
		t.Run(fmt.Sprint(n, " instances"), func(t *testing.T) {
			storetest.RunGiveBacks(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
				primary := &flakyStore{inner: memoryStore(t, now)}
				primary.down.Store(true)
				s, err := failover.New(primary, &failover.Options{Mode: failover.Local, Local: memoryStore(t, now), Instances: n, Logger: discard, Clock: now})
				require.NoError(t, err)
				return withoutReset{s}
			})
		})
	}
}

// withoutReset is a failover.Store without its Reset.
type withoutReset struct{ s *failover.Store }

func (w withoutReset) Take(ctx context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	return w.s.Take(ctx, p, key, cost)
}

func (w withoutReset) TakeAll(ctx context.Context, reqs []ratelimit.BatchItem, results []ratelimit.Result) error {
	return w.s.TakeAll(ctx, reqs, results)
}

func (w withoutReset) Refund(ctx context.Context, p *ratelimit.Policy, key string, cost int64, took ratelimit.Result) error {
	return w.s.Refund(ctx, p, key, cost, took)
}
