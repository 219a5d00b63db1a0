package otellimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/failover"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
	"github.com/tokenfair/ratelimit/otellimit"
	"github.com/tokenfair/ratelimit/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sdk is an SDK meter provider read by a ManualReader, and Metrics on it.
type sdk struct {
	reader *sdkmetric.ManualReader
	m      *otellimit.Metrics
}

func newSDK(t testing.TB) *sdk {
	t.Helper()
	s := &sdk{reader: sdkmetric.NewManualReader()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	var err error
	s.m, err = otellimit.New(mp)
	require.NoError(t, err)
	return s
}

// collect returns the instruments as the reader reads them now, by name.
func (s *sdk) collect(t testing.TB) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, s.reader.Collect(context.Background(), &rm))
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, "github.com/tokenfair/ratelimit/otellimit", sm.Scope.Name)
		for _, m := range sm.Metrics {
			got[m.Name] = m.Data
		}
	}
	return got
}

// sums returns the data points of the int64 sum name, by their attributes
// written as "key=value,...", in the attributes' order.
func (s *sdk) sums(t testing.TB, name string) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	data, ok := s.collect(t)[name]
	if !ok {
		return got
	}
	sum, ok := data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T", name, data)
	for _, dp := range sum.DataPoints {
		got[attrString(dp.Attributes)] = dp.Value
	}
	return got
}

// requests returns rate_limiting.requests, by "policy/result".
func (s *sdk) requests(t testing.TB) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	for attrs, v := range s.sums(t, "rate_limiting.requests") {
		got[attrs] = v
	}
	return got
}

func attrString(set attribute.Set) string {
	var s string
	for i, kv := range set.ToSlice() {
		if i > 0 {
			s += ","
		}
		s += string(kv.Key) + "=" + kv.Value.Emit()
	}
	return s
}

// pr is the attributes of rate_limiting.requests of policy and result.
func pr(policy, result string) string {
	return "rate_limiting.policy=" + policy + ",rate_limiting.result=" + result
}

func keyByHeader(r *http.Request) (string, error) {
	if k := r.Header.Get("X-Client"); k != "" {
		return k, nil
	}
	return "", ratelimit.ErrMissingKey
}

// rig is a net/http handler limited by a Middleware that Metrics observe.
type rig struct {
	*sdk
	handler http.Handler
}

// newRig returns a rig over store (nil: a memory store on a fake clock)
// with next (nil: a handler that answers 200) and opts (nil: none), to
// which it adds the metrics as the Observe function.
func newRig(t *testing.T, store ratelimit.Store, next http.Handler, opts *ratelimit.MiddlewareOptions, policies ...ratelimit.Policy) *rig {
	t.Helper()
	r := &rig{sdk: newSDK(t)}
	if store == nil {
		ms, err := memorystore.New(&memorystore.Options{Clock: new(storetest.Clock).Now})
		require.NoError(t, err)
		store = ms
	}
	lim, err := ratelimit.New(store, policies...)
	require.NoError(t, err)
	o := ratelimit.MiddlewareOptions{Logger: slog.New(slog.DiscardHandler)}
	if opts != nil {
		o = *opts
	}
	o.Observe = r.m.Observe
	mw, err := ratelimit.NewMiddleware(lim, keyByHeader, &o)
	require.NoError(t, err)
	if next == nil {
		next = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	}
	r.handler = nethttp.Wrap(mw)(next)
	return r
}

func (r *rig) get(client string) int {
	return r.getContext(context.Background(), client)
}

func (r *rig) getContext(ctx context.Context, client string) int {
	req := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
	if client != "" {
		req.Header.Set("X-Client", client)
	}
	w := httptest.NewRecorder()
	r.handler.ServeHTTP(w, req)
	return w.Code
}

// TestDecisionsCounted: each policy's own verdict is counted under its
// name, as package metrics counts it.
func TestDecisionsCounted(t *testing.T) {
	perKey := ratelimit.Policy{Name: "per-key", Limit: ratelimit.Per(3, time.Minute)}
	global := ratelimit.Policy{Name: "global", Limit: ratelimit.Per(5, time.Minute), Global: true}
	shadow := ratelimit.Policy{Name: "shadow", Limit: ratelimit.Per(1, time.Minute), DryRun: true}
	r := newRig(t, nil, nil, nil, perKey, global, shadow)
	// a: 3 allowed, then refused by per-key; b: 2 allowed (global spent), 1 refused by global.
	for range 4 {
		r.get("a")
	}
	for range 3 {
		r.get("b")
	}
	assert.Equal(t, http.StatusUnauthorized, r.get(""), "no key")
	assert.Equal(t, map[string]int64{
		pr("per-key", "allowed"): 6, pr("per-key", "limited"): 1, pr("per-key", "invalid"): 1,
		pr("global", "allowed"): 6, pr("global", "limited"): 1, pr("global", "invalid"): 1,
		pr("shadow", "allowed"): 2, pr("shadow", "dry_run_limited"): 5, pr("shadow", "invalid"): 1,
	}, r.requests(t))

	data := r.collect(t)
	sum := data["rate_limiting.requests"].(metricdata.Sum[int64])
	assert.True(t, sum.IsMonotonic, "a counter")
	assert.Equal(t, metricdata.CumulativeTemporality, sum.Temporality)
	d := data["rate_limiting.store.duration"].(metricdata.Histogram[float64])
	require.Len(t, d.DataPoints, 1)
	assert.Equal(t, uint64(7), d.DataPoints[0].Count, "every decided request, not the one without a key")
	assert.Equal(t, 0, d.DataPoints[0].Attributes.Len())
}

// TestInstruments: every instrument has the name, kind, unit and
// description that the docs give.
func TestInstruments(t *testing.T) {
	s := newSDK(t)
	lim, err := ratelimit.New(downStore{}, ratelimit.Policy{Limit: ratelimit.Per(1, time.Minute)})
	require.NoError(t, err)
	req := httptest.NewRequest("GET", "/", nil)
	s.m.Observe(req, ratelimit.Event{Limiter: lim, Result: ratelimit.Result{Allowed: true, Policy: &lim.Policies()[0], Delay: time.Second}})
	s.m.OnError(errors.New("down"))
	var rm metricdata.ResourceMetrics
	require.NoError(t, s.reader.Collect(context.Background(), &rm))
	type shape struct{ kind, unit string }
	got := map[string]shape{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		assert.NotEmpty(t, m.Description, m.Name)
		kind := fmt.Sprintf("%T", m.Data)
		if s, ok := m.Data.(metricdata.Sum[int64]); ok && !s.IsMonotonic {
			kind = "up-down " + kind
		}
		got[m.Name] = shape{kind, m.Unit}
	}
	assert.Equal(t, map[string]shape{
		"rate_limiting.requests":              {"metricdata.Sum[int64]", "{request}"},
		"rate_limiting.store.duration":        {"metricdata.Histogram[float64]", "s"},
		"rate_limiting.store.degraded":        {"metricdata.Gauge[int64]", "1"},
		"rate_limiting.queued_requests":       {"up-down metricdata.Sum[int64]", "{request}"},
		"rate_limiting.active_requests":       {"up-down metricdata.Sum[int64]", "{request}"},
		"rate_limiting.near_limit_requests":   {"metricdata.Sum[int64]", "{request}"},
		"rate_limiting.request.time_in_queue": {"metricdata.Histogram[float64]", "s"},
		"rate_limiting.store.errors":          {"metricdata.Sum[int64]", "{error}"},
	}, got)
}

// A request refused for want of an in-flight slot is counted as limited by
// the in-flight policy; the one that holds the slot is active until its
// handler returns.
func TestInFlight(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		entered <- struct{}{}
		<-release
	})
	r := newRig(t, nil, slow, &ratelimit.MiddlewareOptions{MaxInFlight: 1}, ratelimit.Policy{Name: "per-key", Limit: ratelimit.Per(10, time.Minute)})
	assert.Equal(t, map[string]int64{"": 0}, r.sums(t, "rate_limiting.active_requests"))
	done := make(chan int)
	go func() { done <- r.get("a") }()
	<-entered
	assert.Equal(t, map[string]int64{"": 1}, r.sums(t, "rate_limiting.active_requests"))
	assert.Equal(t, http.StatusTooManyRequests, r.get("a"), "a's one slot is taken")
	close(release)
	assert.Equal(t, http.StatusOK, <-done)
	assert.Equal(t, map[string]int64{"": 0}, r.sums(t, "rate_limiting.active_requests"))
	assert.Equal(t, map[string]int64{pr("inflight", "limited"): 1, pr("per-key", "allowed"): 1}, r.requests(t))
}

// A request that a shaping policy delays is queued until its wait ends,
// here by its context's end, and its wait is recorded.
func TestQueued(t *testing.T) {
	observed := make(chan ratelimit.Event, 4)
	s := newSDK(t)
	store, err := memorystore.New(&memorystore.Options{Clock: new(storetest.Clock).Now})
	require.NoError(t, err)
	lim, err := ratelimit.New(store, ratelimit.Policy{Name: "shape", Limit: ratelimit.Per(1, time.Minute).WithBurst(5), Algorithm: ratelimit.LeakyShape})
	require.NoError(t, err)
	mw, err := ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{
		Logger: slog.New(slog.DiscardHandler),
		Observe: func(r *http.Request, ev ratelimit.Event) {
			s.m.Observe(r, ev)
			observed <- ev
		}})
	require.NoError(t, err)
	r := &rig{sdk: s, handler: nethttp.Wrap(mw)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))}

	assert.Equal(t, http.StatusOK, r.get("a"), "the first goes at once")
	<-observed
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- r.getContext(ctx, "a") }()
	ev := <-observed
	require.Equal(t, time.Minute, ev.Result.Delay, "the second waits its turn")
	assert.Equal(t, map[string]int64{"": 1}, r.sums(t, "rate_limiting.queued_requests"))
	cancel()
	assert.Equal(t, http.StatusServiceUnavailable, <-done, "its wait abandoned")
	assert.Equal(t, map[string]int64{"": 0}, r.sums(t, "rate_limiting.queued_requests"))
	h := r.collect(t)["rate_limiting.request.time_in_queue"].(metricdata.Histogram[float64])
	require.Len(t, h.DataPoints, 1)
	assert.Equal(t, uint64(1), h.DataPoints[0].Count, "the first did not wait")
	assert.Equal(t, 60.0, h.DataPoints[0].Sum)
	assert.Equal(t, map[string]int64{pr("shape", "allowed"): 2}, r.requests(t))
}

// A request that a policy's penalty box refuses is counted as banned by
// that policy, the refusal that bans included.
func TestBansCounted(t *testing.T) {
	login := ratelimit.Policy{Name: "login", Limit: ratelimit.Per(1, time.Hour),
		Penalty: ratelimit.Penalty{After: 2, Within: time.Minute, For: time.Hour}}
	r := newRig(t, nil, nil, nil, ratelimit.Policy{Name: "api", Limit: ratelimit.Per(100, time.Minute)}, login)
	for range 5 {
		r.get("a") // allowed, limited, then banned three times
	}
	assert.Equal(t, map[string]int64{
		pr("api", "allowed"): 2, pr("login", "allowed"): 1, pr("login", "limited"): 1, pr("login", "banned"): 3,
	}, r.requests(t))
}

type downStore struct{}

func (downStore) Take(context.Context, *ratelimit.Policy, string, int64) (ratelimit.Result, error) {
	return ratelimit.Result{}, errors.New("down")
}

// TestStore: a failover.Store's errors and health, its fail-open and
// local decisions, and a bare store's failures.
func TestStore(t *testing.T) {
	s := newSDK(t)
	assert.Equal(t, int64(0), gauge(t, s, "rate_limiting.store.degraded"), "healthy until told otherwise")
	fo, err := failover.New(downStore{}, &failover.Options{Mode: failover.Open, OnError: s.m.OnError, OnHealthChange: s.m.OnHealthChange,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	r := newRigOn(t, s, fo, ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	for range 3 {
		assert.Equal(t, http.StatusOK, r.get("a"))
	}
	assert.Equal(t, map[string]int64{pr("default", "fallback"): 3}, r.requests(t))
	assert.Equal(t, int64(1), gauge(t, s, "rate_limiting.store.degraded"))
	assert.Equal(t, map[string]int64{"": 1}, s.sums(t, "rate_limiting.store.errors"), "one error; the breaker spared the others")
	s.m.OnHealthChange(true, nil)
	assert.Equal(t, int64(0), gauge(t, s, "rate_limiting.store.degraded"))

	local, err := memorystore.New(&memorystore.Options{Clock: new(storetest.Clock).Now})
	require.NoError(t, err)
	fo, err = failover.New(downStore{}, &failover.Options{Mode: failover.Local, Local: local, Instances: 2, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	r = newRigOn(t, s, fo, ratelimit.Policy{Name: "shared", Limit: ratelimit.Per(4, time.Minute)})
	for range 3 {
		r.get("a")
	}
	assert.Equal(t, int64(2), r.requests(t)[pr("shared", "local")], "within this instance's share, 2 of 4")
	assert.Equal(t, int64(1), r.requests(t)[pr("shared", "limited")])

	r = newRigOn(t, s, downStore{}, ratelimit.Policy{Name: "bare", Limit: ratelimit.PerSecond(1)})
	assert.Equal(t, http.StatusServiceUnavailable, r.get("a"))
	assert.Equal(t, int64(1), r.requests(t)[pr("bare", "store_error")])
}

// newRigOn is a rig of the Metrics of s over store.
func newRigOn(t *testing.T, s *sdk, store ratelimit.Store, policies ...ratelimit.Policy) *rig {
	t.Helper()
	lim, err := ratelimit.New(store, policies...)
	require.NoError(t, err)
	mw, err := ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{Observe: s.m.Observe, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return &rig{sdk: s, handler: nethttp.Wrap(mw)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))}
}

func gauge(t *testing.T, s *sdk, name string) int64 {
	t.Helper()
	g, ok := s.collect(t)[name].(metricdata.Gauge[int64])
	require.True(t, ok, name)
	require.Len(t, g.DataPoints, 1)
	return g.DataPoints[0].Value
}

// TestNearLimit: the allowed decisions that leave fewer than the fraction
// of the burst are counted by policy.
func TestNearLimit(t *testing.T) {
	r := newRig(t, nil, nil, nil, ratelimit.Policy{Name: "api", Limit: ratelimit.Per(4, time.Minute)})
	require.NoError(t, r.m.SetNearLimit(0.5))
	for range 5 { // 3, 2, 1 and 0 tokens left, then a refusal
		r.get("a")
	}
	assert.Equal(t, map[string]int64{"rate_limiting.policy=api": 2}, r.sums(t, "rate_limiting.near_limit_requests"))
	require.NoError(t, r.m.SetNearLimit(1))
	r.get("b") // 3 left: fewer than 4
	assert.Equal(t, map[string]int64{"rate_limiting.policy=api": 3}, r.sums(t, "rate_limiting.near_limit_requests"))
	for _, f := range []float64{0, -0.5, 1.5} {
		assert.EqualError(t, r.m.SetNearLimit(f), fmt.Sprintf("otellimit: SetNearLimit(%v): the fraction of the burst must be in (0, 1]", f))
	}
}

// TestManyLimiters: past the limiters whose attribute sets it keeps, every
// decision is counted all the same, under its policy's name.
func TestManyLimiters(t *testing.T) {
	s := newSDK(t)
	store, err := memorystore.New(nil)
	require.NoError(t, err)
	var lims []*ratelimit.Limiter
	for i := range 70 {
		l, err := ratelimit.New(store, ratelimit.Policy{Name: fmt.Sprintf("p%d", i), Limit: ratelimit.Per(1, time.Minute)})
		require.NoError(t, err)
		lims = append(lims, l)
	}
	mw, err := ratelimit.NewMiddleware(lims[0], keyByHeader, &ratelimit.MiddlewareOptions{Observe: s.m.Observe, Quiet: true,
		LimiterFor: func(r *http.Request) *ratelimit.Limiter { return lims[len(r.URL.Path)-1] }})
	require.NoError(t, err)
	h := nethttp.Wrap(mw)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	want := map[string]int64{}
	for i := range lims {
		for range 2 {
			req := httptest.NewRequest("GET", "/"+strings.Repeat("x", i), nil)
			req.Header.Set("X-Client", "a")
			h.ServeHTTP(httptest.NewRecorder(), req)
		}
		want[pr(fmt.Sprintf("p%d", i), "allowed")] = 1
		want[pr(fmt.Sprintf("p%d", i), "limited")] = 1
	}
	assert.Equal(t, want, s.requests(t))
}

// failingMeter refuses to make the instrument named bad.
type failingMeter struct {
	noop.Meter
	bad string
}

func (m failingMeter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	if name == m.bad {
		return nil, errors.New("refused")
	}
	return m.Meter.Int64Counter(name, opts...)
}

type failingProvider struct {
	noop.MeterProvider
	bad string
}

func (p failingProvider) Meter(string, ...metric.MeterOption) metric.Meter {
	return failingMeter{bad: p.bad}
}

// TestNewErrors: New names the instrument that the provider refuses; nil
// is the global provider.
func TestNewErrors(t *testing.T) {
	_, err := otellimit.New(failingProvider{bad: "rate_limiting.store.errors"})
	assert.EqualError(t, err, "otellimit: New: rate_limiting.store.errors: refused")
	m, err := otellimit.New(nil)
	require.NoError(t, err)
	assert.NotNil(t, m)
}
