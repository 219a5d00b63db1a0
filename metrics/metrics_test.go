package metrics_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/failover"
	"github.com/tokenfair/ratelimit/internal/outcome"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/metrics"
	"github.com/tokenfair/ratelimit/nethttp"
	"github.com/tokenfair/ratelimit/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func keyByHeader(r *http.Request) (string, error) {
	if k := r.Header.Get("X-Client"); k != "" {
		return k, nil
	}
	return "", ratelimit.ErrMissingKey
}

type rig struct {
	reg     *prometheus.Registry
	m       *metrics.Metrics
	handler http.Handler
	store   *memorystore.Store
}

func newRig(t *testing.T, store ratelimit.Store, policies ...ratelimit.Policy) *rig {
	t.Helper()
	return newRigWith(t, store, nil, policies, nil)
}

// newRigWith is newRig with a next handler and middleware options (nil
// for none), to which it adds the metrics as the Observe function.
func newRigWith(t *testing.T, store ratelimit.Store, next http.Handler, policies []ratelimit.Policy, opts *ratelimit.MiddlewareOptions) *rig {
	t.Helper()
	r := &rig{reg: prometheus.NewRegistry()}
	var err error
	r.m, err = metrics.New(r.reg)
	require.NoError(t, err)
	if store == nil {
		r.store, err = memorystore.New(&memorystore.Options{Clock: new(storetest.Clock).Now})
		require.NoError(t, err)
		require.NoError(t, r.m.TrackKeys("memory", r.store.Len))
		store = r.store
	}
	lim, err := ratelimit.New(store, policies...)
	require.NoError(t, err)
	var o ratelimit.MiddlewareOptions
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
	req := httptest.NewRequest("GET", "/", nil)
	if client != "" {
		req.Header.Set("X-Client", client)
	}
	w := httptest.NewRecorder()
	r.handler.ServeHTTP(w, req)
	return w.Code
}

func (r *rig) count(policy, outcome string) int {
	return int(testutil.ToFloat64(metricVec(r.reg, policy, outcome)))
}

// metricVec finds ratelimit_decisions_total{policy, outcome} by gathering.
func metricVec(reg *prometheus.Registry, policy, outcome string) prometheus.Collector {
	return collectorFunc(func(ch chan<- prometheus.Metric) {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() != "ratelimit_decisions_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["policy"] == policy && labels["outcome"] == outcome {
					ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("x", "x", nil, nil), prometheus.CounterValue, m.GetCounter().GetValue())
				}
			}
		}
	})
}

type collectorFunc func(chan<- prometheus.Metric)

func (f collectorFunc) Describe(chan<- *prometheus.Desc)    {}
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }

func TestDecisionsCounted(t *testing.T) {
	perKey := ratelimit.Policy{Name: "per-key", Limit: ratelimit.Per(3, time.Minute)}
	global := ratelimit.Policy{Name: "global", Limit: ratelimit.Per(5, time.Minute), Global: true}
	shadow := ratelimit.Policy{Name: "shadow", Limit: ratelimit.Per(1, time.Minute), DryRun: true}
	r := newRig(t, nil, perKey, global, shadow)
	// a: 3 allowed, then refused by per-key; b: 2 allowed (global spent), 1 refused by global.
	for range 4 {
		r.get("a")
	}
	for range 3 {
		r.get("b")
	}
	r.get("") // no key
	// Each policy's own verdict: a's 4th request is refused by per-key
	// while global would have allowed it; b's 3rd the other way round.
	assert.Equal(t, 6, r.count("per-key", metrics.Allowed))
	assert.Equal(t, 1, r.count("per-key", metrics.Limited))
	assert.Equal(t, 6, r.count("global", metrics.Allowed))
	assert.Equal(t, 1, r.count("global", metrics.Limited))
	assert.Equal(t, 2, r.count("shadow", metrics.Allowed))
	assert.Equal(t, 5, r.count("shadow", metrics.DryRunLimited))
	for _, p := range []string{"per-key", "global", "shadow"} {
		assert.Equal(t, 1, r.count(p, metrics.Invalid), p)
	}
	assert.Equal(t, 9, testutil.CollectAndCount(r.reg, "ratelimit_decisions_total"), "3 policies × 3 outcomes seen")
	assert.Equal(t, 5.0, testutil.ToFloat64(gauge(r.reg, "ratelimit_keys")), "per-key a and b, global *, shadow a and b")
}

// A calendar quota and a per-key limit are counted under their policies'
// names, like any other.
func TestQuotaAndLimitForCounted(t *testing.T) {
	rate := ratelimit.Policy{Limit: ratelimit.Per(10, time.Minute),
		LimitFor: func(key string) (ratelimit.Limit, bool) { return ratelimit.Per(1, time.Minute), key == "slow" }}
	daily := ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(3, time.UTC)}
	r := newRig(t, nil, rate, daily)
	for range 4 {
		r.get("a")
	}
	r.get("slow")
	r.get("slow")
	assert.Equal(t, 5, r.count("default", metrics.Allowed), "each policy's own verdict: a's 4, slow's first")
	assert.Equal(t, 1, r.count("default", metrics.Limited), "slow's second, by its own limit")
	assert.Equal(t, 5, r.count("daily", metrics.Allowed))
	assert.Equal(t, 1, r.count("daily", metrics.Limited), "a's fourth")
}

// shadowDown is a memory store whose dry-run policy "shadow" fails.
type shadowDown struct{ ratelimit.Store }

func (s shadowDown) Take(ctx context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	if p.Name == "shadow" {
		return ratelimit.Result{}, errors.New("connection refused")
	}
	return s.Store.Take(ctx, p, key, cost)
}

// TestEachPolicysOwnFallback: a policy is counted as a fallback by its own
// result, not the binding one's: a dry-run policy whose store fails while
// the enforcing one answers is a fallback, and the enforcing one allowed.
func TestEachPolicysOwnFallback(t *testing.T) {
	store, err := memorystore.New(nil)
	require.NoError(t, err)
	r := newRig(t, shadowDown{store},
		ratelimit.Policy{Name: "api", Limit: ratelimit.Per(5, time.Minute)},
		ratelimit.Policy{Name: "shadow", Limit: ratelimit.Per(1, time.Minute), DryRun: true})
	assert.Equal(t, http.StatusOK, r.get("a"))
	assert.Equal(t, 1, r.count("api", metrics.Allowed))
	assert.Equal(t, 1, r.count("shadow", metrics.Fallback))
	assert.Equal(t, 2, testutil.CollectAndCount(r.reg, "ratelimit_decisions_total"), "no other series")
}

// TestLocalOutcome: while its store fails, a failover.Store in Local mode
// decides within this instance's share (2 instances: a burst of 2 of 4);
// what it allows is counted as local, neither allowed nor fallback, and
// what it refuses as limited.
func TestLocalOutcome(t *testing.T) {
	local, err := memorystore.New(&memorystore.Options{Clock: new(storetest.Clock).Now})
	require.NoError(t, err)
	fo, err := failover.New(downStore{}, &failover.Options{Mode: failover.Local, Local: local, Instances: 2, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	r := newRigWith(t, fo, nil, []ratelimit.Policy{{Limit: ratelimit.Per(4, time.Minute)}}, &ratelimit.MiddlewareOptions{Logger: slog.New(slog.DiscardHandler)})
	for range 3 {
		r.get("a")
	}
	assert.Equal(t, 2, r.count("default", metrics.Local))
	assert.Equal(t, 1, r.count("default", metrics.Limited))
	assert.Equal(t, 2, testutil.CollectAndCount(r.reg, "ratelimit_decisions_total"), "no other series")
}

// A request refused for want of an in-flight slot is counted as limited by
// the in-flight policy, not as allowed by the limiter's.
func TestInFlightRefusalsCounted(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		entered <- struct{}{}
		<-release
	})
	r := newRigWith(t, nil, slow, []ratelimit.Policy{{Name: "per-key", Limit: ratelimit.Per(10, time.Minute)}}, &ratelimit.MiddlewareOptions{MaxInFlight: 1})
	done := make(chan int)
	go func() { done <- r.get("a") }()
	<-entered
	assert.Equal(t, http.StatusTooManyRequests, r.get("a"), "a's one slot is taken")
	close(release)
	assert.Equal(t, http.StatusOK, <-done)
	assert.Equal(t, 1, r.count("inflight", metrics.Limited))
	assert.Equal(t, 1, r.count("per-key", metrics.Allowed), "the refused request is not counted as allowed")
	assert.Equal(t, 2, testutil.CollectAndCount(r.reg, "ratelimit_decisions_total"), "no other series")
}

func gauge(reg *prometheus.Registry, name string) prometheus.Collector {
	return collectorFunc(func(ch chan<- prometheus.Metric) {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == name {
				m := mf.GetMetric()[0]
				v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
				ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("x", "x", nil, nil), prometheus.GaugeValue, v)
			}
		}
	})
}

type downStore struct{}

func (downStore) Take(context.Context, *ratelimit.Policy, string, int64) (ratelimit.Result, error) {
	return ratelimit.Result{}, errors.New("down")
}

func TestStoreErrorsAndDegraded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	fo, err := failover.New(downStore{}, &failover.Options{Mode: failover.Open, OnError: m.OnError, OnHealthChange: m.OnHealthChange,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	lim, err := ratelimit.New(fo, ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	require.NoError(t, err)
	mw, err := ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{Observe: m.Observe})
	require.NoError(t, err)
	h := nethttp.Wrap(mw)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-Client", "a")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	r := &rig{reg: reg}
	assert.Equal(t, 3, r.count("default", metrics.Fallback))
	assert.Equal(t, 1.0, testutil.ToFloat64(gauge(reg, "ratelimit_store_degraded")))
	assert.Equal(t, 1.0, testutil.ToFloat64(gauge(reg, "ratelimit_store_errors_total")), "one error; the breaker spared the others")

	bare, err := ratelimit.New(downStore{}, ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	require.NoError(t, err)
	mw, err = ratelimit.NewMiddleware(bare, keyByHeader, &ratelimit.MiddlewareOptions{Observe: m.Observe, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-Client", "a")
	nethttp.Wrap(mw)(http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), req)
	assert.Equal(t, 1, r.count("default", metrics.StoreError))
}

func TestExposition(t *testing.T) {
	r := newRig(t, nil, ratelimit.Policy{Limit: ratelimit.Per(1, time.Minute)})
	r.get("a")
	r.get("a")
	err := testutil.GatherAndCompare(r.reg, strings.NewReader(`
# HELP ratelimit_decisions_total Rate-limit decisions by policy and outcome.
# TYPE ratelimit_decisions_total counter
ratelimit_decisions_total{outcome="allowed",policy="default"} 1
ratelimit_decisions_total{outcome="limited",policy="default"} 1
`), "ratelimit_decisions_total")
	assert.NoError(t, err)
}

// TestRegisterTwice: registering the metrics twice, or a store's keys
// twice, fails with an error naming the metric or the store.
func TestRegisterTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	_, err = metrics.New(reg)
	assert.ErrorContains(t, err, "metrics: New: registering ratelimit_decisions_total: ")
	require.NoError(t, m.TrackKeys("memory", func() int { return 0 }))
	assert.ErrorContains(t, m.TrackKeys("memory", func() int { return 0 }), `metrics: TrackKeys("memory"): `)
}

// TestNewLeavesTheRegistryAsItWas: when one metric cannot be registered,
// New names it and leaves none of the others registered.
func TestNewLeavesTheRegistryAsItWas(t *testing.T) {
	for _, name := range []string{"ratelimit_decisions_total", "ratelimit_decision_duration_seconds", "ratelimit_shaping_delay_seconds",
		"ratelimit_store_degraded", "ratelimit_store_errors_total", "ratelimit_warnings_total", "ratelimit_near_limit_total"} {
		reg := prometheus.NewRegistry()
		other := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "someone else's"})
		require.NoError(t, reg.Register(other))
		_, err := metrics.New(reg)
		assert.ErrorContains(t, err, "metrics: New: registering "+name+": ", name)
		families, err := reg.Gather()
		require.NoError(t, err)
		var names []string
		for _, f := range families {
			names = append(names, f.GetName())
		}
		assert.Equal(t, []string{name}, names, "only the other gauge is left")
	}
}

// TestWarnings: the records with a "warning" attribute that go through
// Logger are counted by kind, and every record reaches the handler it
// wraps, which keeps its own level.
func TestWarnings(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	var buf bytes.Buffer
	log := m.Logger(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	log.Warn("ratelimit: one key", "warning", "one-key")
	log.With("warning", "one-key").Warn("ratelimit: one key again")
	log.WithGroup("g").Warn("ratelimit: in a group", "warning", "wide-trusted-range")
	log.Info("not a warning", "warnings", "x")
	log.Debug("below the handler's level", "warning", "debug-only")
	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ratelimit_warnings_total Misconfiguration warnings logged by the middleware or KeyByIP, by kind.
# TYPE ratelimit_warnings_total counter
ratelimit_warnings_total{kind="one-key"} 2
ratelimit_warnings_total{kind="wide-trusted-range"} 1
`), "ratelimit_warnings_total")
	assert.NoError(t, err)
	assert.Equal(t, 4, strings.Count(buf.String(), "\n"), "every record at the handler's level passes:\n%s", &buf)
	assert.NotContains(t, buf.String(), "below the handler's level")

	// A handler whose level drops warnings: they are counted all the same.
	quiet := m.Logger(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
	quiet.Warn("ratelimit: one key", "warning", "one-key")
	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ratelimit_warnings_total Misconfiguration warnings logged by the middleware or KeyByIP, by kind.
# TYPE ratelimit_warnings_total counter
ratelimit_warnings_total{kind="one-key"} 3
ratelimit_warnings_total{kind="wide-trusted-range"} 1
`), "ratelimit_warnings_total")
	assert.NoError(t, err)
}

// TestMiddlewareWarningsCounted: a warning of the middleware itself, two
// limiters on one store that give one policy name two limits, is counted
// through Options.Logger.
func TestMiddlewareWarningsCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	store, err := memorystore.New(nil)
	require.NoError(t, err)
	a, err := ratelimit.New(store, ratelimit.Policy{Name: "api", Limit: ratelimit.Per(10, time.Minute)})
	require.NoError(t, err)
	b, err := ratelimit.New(store, ratelimit.Policy{Name: "api", Limit: ratelimit.Per(20, time.Minute)})
	require.NoError(t, err)
	mw, err := ratelimit.NewMiddleware(a, keyByHeader, &ratelimit.MiddlewareOptions{
		Observe:    m.Observe,
		Logger:     m.Logger(slog.DiscardHandler),
		LimiterFor: func(*http.Request) *ratelimit.Limiter { return b },
	})
	require.NoError(t, err)
	h := nethttp.Wrap(mw)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-Client", "a")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ratelimit_warnings_total Misconfiguration warnings logged by the middleware or KeyByIP, by kind.
# TYPE ratelimit_warnings_total counter
ratelimit_warnings_total{kind="shared-policy-name"} 1
`), "ratelimit_warnings_total")
	assert.NoError(t, err)
}

// A request that a policy's penalty box refuses is counted as "banned" by
// that policy, the refusal that bans included, and never as allowed.
func TestBansCounted(t *testing.T) {
	login := ratelimit.Policy{Name: "login", Limit: ratelimit.Per(1, time.Hour),
		Penalty: ratelimit.Penalty{After: 2, Within: time.Minute, For: time.Hour}}
	r := newRig(t, nil, login)
	for range 5 {
		r.get("a") // allowed, limited, then banned three times
	}
	assert.Equal(t, 1, r.count("login", metrics.Allowed))
	assert.Equal(t, 1, r.count("login", metrics.Limited))
	assert.Equal(t, 3, r.count("login", metrics.Banned))
}

// A ban refuses before the other policies are asked, so they count
// nothing for the requests it refuses.
func TestBanCountsOnlyItsPolicy(t *testing.T) {
	login := ratelimit.Policy{Name: "login", Limit: ratelimit.Per(1, time.Hour),
		Penalty: ratelimit.Penalty{After: 2, Within: time.Minute, For: time.Hour}}
	api := ratelimit.Policy{Name: "api", Limit: ratelimit.Per(100, time.Hour)}
	r := newRig(t, nil, login, api)
	for range 6 {
		r.get("a") // allowed, limited, then banned four times
	}
	assert.Equal(t, 1, r.count("login", metrics.Allowed))
	assert.Equal(t, 1, r.count("login", metrics.Limited))
	assert.Equal(t, 4, r.count("login", metrics.Banned))
	assert.Equal(t, 2, r.count("api", metrics.Allowed), "api counted for the requests it decided only")
	assert.Equal(t, 4, testutil.CollectAndCount(r.reg, "ratelimit_decisions_total"), "no other series")
}

// TestOutcomeNames: the outcome label values are the names the two
// observers share (internal/outcome), in its order.
func TestOutcomeNames(t *testing.T) {
	assert.Equal(t, outcome.Names, [outcome.N]string{metrics.Allowed, metrics.Limited, metrics.Banned, metrics.DryRunLimited,
		metrics.Fallback, metrics.Local, metrics.StoreError, metrics.Invalid})
}
