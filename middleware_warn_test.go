package ratelimit_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

// captureLogs sends slog.Default to a buffer for the test.
func captureLogs(t *testing.T) *bytes.Buffer {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return &buf
}

func warnings(buf *bytes.Buffer, kind string) int {
	return strings.Count(buf.String(), "warning="+kind)
}

// warningCounter is a slog.Handler that counts records by their "warning"
// attribute, as a metrics exporter that wraps a handler would.
type warningCounter struct {
	mu    sync.Mutex
	kinds map[string]int
	other int // records without a "warning" attribute
}

func (c *warningCounter) Enabled(context.Context, slog.Level) bool { return true }

func (c *warningCounter) WithAttrs([]slog.Attr) slog.Handler { return c }

func (c *warningCounter) WithGroup(string) slog.Handler { return c }

func (c *warningCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	kind := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "warning" {
			kind = a.Value.String()
			return false
		}
		return true
	})
	if kind == "" {
		c.other++
		return nil
	}
	if c.kinds == nil {
		c.kinds = map[string]int{}
	}
	c.kinds[kind]++
	return nil
}

func (c *warningCounter) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.kinds)
}

// countingLogger returns a Logger that counts warnings by kind.
func countingLogger() (*slog.Logger, *warningCounter) {
	c := &warningCounter{}
	return slog.New(c), c
}

// serveKeys serves n requests keyed by key: RemoteAddr from 200 addresses,
// X-Client from 500 clients, and an X-Forwarded-For on each.
func serveKeys(t *testing.T, key ratelimit.KeyFunc, n int, opts *ratelimit.MiddlewareOptions) {
	t.Helper()
	h := newHarness(t, setup{limit: ratelimit.PerSecond(1_000_000), key: key, opts: opts})
	for i := range n {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = fmt.Sprintf("192.0.2.%d:1234", i%200)
		r.Header.Set("X-Forwarded-For", "198.51.100.7")
		r.Header.Set("X-Client", fmt.Sprint("client-", i%500))
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
}

func TestWarnForwardedWithoutTrustedProxy(t *testing.T) {
	logs := captureLogs(t)
	byIP, err := ratelimit.KeyByIP(nil)
	require.NoError(t, err)
	serveKeys(t, byIP, 1, nil)
	assert.Equal(t, 1, warnings(logs, "forwarded-without-trusted-proxy"), "on the first forwarded request: %s", logs.String())
	serveKeys(t, byIP, 1000, nil)
	assert.Equal(t, 1, warnings(logs, "forwarded-without-trusted-proxy"), "once: %s", logs.String())

	logs.Reset()
	trusted, err := ratelimit.KeyByIP(&ratelimit.IPOptions{TrustedProxies: []string{"192.0.2.0/24"}})
	require.NoError(t, err)
	serveKeys(t, trusted, 100, nil)
	quiet, err := ratelimit.KeyByIP(&ratelimit.IPOptions{Quiet: true})
	require.NoError(t, err)
	serveKeys(t, quiet, 100, nil)
	assert.Empty(t, logs.String())
}

// The warning is logged once however many goroutines see forwarding
// headers at once.
func TestWarnForwardedWithoutTrustedProxyConcurrent(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	byIP, err := ratelimit.KeyByIP(&ratelimit.IPOptions{Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				r := httptest.NewRequest("GET", "/", nil)
				r.Header.Set("Forwarded", "for=198.51.100.7")
				_, _ = byIP(r)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 1, warnings(&logs, "forwarded-without-trusted-proxy"), logs.String())
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestWarnWideTrustedRange(t *testing.T) {
	logs := captureLogs(t)
	for _, cidr := range []string{"0.0.0.0/0", "::/0", "128.0.0.0/1", "2000::/3"} {
		_, err := ratelimit.KeyByIP(&ratelimit.IPOptions{TrustedProxies: []string{cidr}})
		require.NoError(t, err)
	}
	assert.Equal(t, 4, warnings(logs, "wide-trusted-range"), logs.String())
	logs.Reset()
	for _, cidr := range []string{"10.0.0.0/8", "2001:db8::/32", "192.0.2.1"} {
		_, err := ratelimit.KeyByIP(&ratelimit.IPOptions{TrustedProxies: []string{cidr}})
		require.NoError(t, err)
	}
	_, err := ratelimit.KeyByIP(&ratelimit.IPOptions{TrustedProxies: []string{"0.0.0.0/0"}, Quiet: true})
	require.NoError(t, err)
	assert.Empty(t, logs.String())
}

// The one-key warning goes to MiddlewareOptions.Logger once, however long the one
// key lasts; a Logger that counts warnings (what metrics do) sees it.
func TestWarnOneKey(t *testing.T) {
	logs := captureLogs(t)
	logger, counter := countingLogger()
	one := func(*http.Request) (string, error) { return "everyone", nil }
	serveKeys(t, one, 3*64*256, &ratelimit.MiddlewareOptions{Logger: logger})
	assert.Equal(t, map[string]int{"one-key": 1}, counter.counts(), "once, however long it lasts")
	assert.Zero(t, counter.other)
	assert.Empty(t, logs.String(), "the Logger of Options, not slog.Default")

	serveKeys(t, one, 2*64*256, nil)
	assert.Equal(t, 1, warnings(logs, "one-key"), "no Logger: slog.Default")

	logs.Reset()
	serveKeys(t, keyByHeader, 2*64*256, nil)
	serveKeys(t, one, 2*64*256, &ratelimit.MiddlewareOptions{Quiet: true})
	assert.Empty(t, logs.String(), "500 clients, or the warning off")
}

// plansSetup is a harness of limiter main whose LimiterFor picks the
// limiter of plans named by the request's X-Plan, with opts.
func plansSetup(main *ratelimit.Limiter, plans map[string]*ratelimit.Limiter, opts ratelimit.MiddlewareOptions) setup {
	opts.LimiterFor = func(r *http.Request) *ratelimit.Limiter { return plans[r.Header.Get("X-Plan")] }
	return setup{limiter: main, opts: &opts}
}

func servePlan(h http.Handler, plan string) {
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Client", "c")
	r.Header.Set("X-Plan", plan)
	h.ServeHTTP(httptest.NewRecorder(), r)
}

// The shared-policy-name check is made per Middleware, on its own limiter
// as soon as it is built and on each limiter LimiterFor picks the first
// time it is picked: one warning for two limiters of one store that give
// one name two limits.
func TestWarnSharedPolicyName(t *testing.T) {
	first := newHarness(t, setup{policies: []ratelimit.Policy{{Name: "main", Limit: ratelimit.PerSecond(1)}}})
	main := first.lim
	newLimiter := func(name string, l ratelimit.Limit) *ratelimit.Limiter { // on the same store
		return newHarness(t, setup{policies: []ratelimit.Policy{{Name: name, Limit: l}}, store: first.store}).lim
	}
	free := newLimiter("tier", ratelimit.PerSecond(5))
	paid := newLimiter("tier", ratelimit.PerSecond(50))
	alsoFree := newLimiter("tier", ratelimit.PerSecond(5))

	// Two limiters reached through LimiterFor, one name, two limits.
	logger, counter := countingLogger()
	h := newHarness(t, plansSetup(main, map[string]*ratelimit.Limiter{"free": free, "paid": paid}, ratelimit.MiddlewareOptions{Logger: logger}))
	for range 3 {
		servePlan(h, "free")
		servePlan(h, "")
	}
	assert.Empty(t, counter.counts(), "one limit per name so far")
	for range 3 {
		servePlan(h, "paid")
		servePlan(h, "free")
	}
	assert.Equal(t, map[string]int{"shared-policy-name": 1}, counter.counts(), "once")

	// The same limit under one name is fine.
	logger, counter = countingLogger()
	h = newHarness(t, plansSetup(main, map[string]*ratelimit.Limiter{"free": free, "also": alsoFree}, ratelimit.MiddlewareOptions{Logger: logger}))
	servePlan(h, "free")
	servePlan(h, "also")
	assert.Empty(t, counter.counts())

	// The Middleware's own limiter is checked when it is built, against
	// the limiters picked later.
	logger, counter = countingLogger()
	h = newHarness(t, plansSetup(free, map[string]*ratelimit.Limiter{"paid": paid}, ratelimit.MiddlewareOptions{Logger: logger}))
	assert.Empty(t, counter.counts())
	for range 3 {
		servePlan(h, "paid")
	}
	assert.Equal(t, map[string]int{"shared-policy-name": 1}, counter.counts())

	// Turned off.
	logger, counter = countingLogger()
	h = newHarness(t, plansSetup(free, map[string]*ratelimit.Limiter{"paid": paid}, ratelimit.MiddlewareOptions{Logger: logger, Quiet: true}))
	servePlan(h, "paid")
	assert.Empty(t, counter.counts())
}

// Limiters of different Middlewares, or on different stores, never share a
// bucket through a name, so they are not compared.
func TestWarnSharedPolicyNameNotAcross(t *testing.T) {
	logs := captureLogs(t)
	first := newHarness(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(5)}}})
	newHarness(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(50)}}, store: first.store})
	assert.Empty(t, logs.String(), "two Middlewares: each checks its own limiters")

	a := newHarness(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(5)}}}).lim
	b := newHarness(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(50)}}}).lim
	h := newHarness(t, plansSetup(a, map[string]*ratelimit.Limiter{"b": b}, ratelimit.MiddlewareOptions{}))
	servePlan(h, "b")
	assert.Empty(t, logs.String(), "two stores: their buckets are apart")
}

// storeFunc is a Store whose dynamic type is a func, which cannot be a map
// key or compared.
type storeFunc func(ctx context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error)

func (f storeFunc) Take(ctx context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	return f(ctx, p, key, cost)
}

// A store that cannot be compared is not checked for shared names, and
// works.
func TestWarnSharedPolicyNameUncomparableStore(t *testing.T) {
	logs := captureLogs(t)
	var a, b *ratelimit.Limiter
	var h http.Handler
	require.NotPanics(t, func() {
		first := newHarness(t, setup{
			policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(1)}},
			wrap:     func(s ratelimit.Store) ratelimit.Store { return storeFunc(s.Take) },
		})
		a = first.lim
		b = newHarness(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(2)}}, store: first.store}).lim
	})
	require.NotPanics(t, func() {
		h = newHarness(t, plansSetup(a, map[string]*ratelimit.Limiter{"b": b}, ratelimit.MiddlewareOptions{}))
	})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	assert.Equal(t, http.StatusUnauthorized, w.Code, "no X-Client")
	for _, plan := range []string{"", "b"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Client", "c"+plan) // one name, two limits: one bucket each
		r.Header.Set("X-Plan", plan)
		w := httptest.NewRecorder()
		require.NotPanics(t, func() { h.ServeHTTP(w, r) })
		assert.Equal(t, http.StatusOK, w.Code, "plan %q", plan)
	}
	assert.NotContains(t, logs.String(), "warning=", "no warning (the 401 is logged as a refusal)")
}

// Quiet turns off every warning of KeyByIP, or of the Middleware, and
// those only.
func TestWarningsQuiet(t *testing.T) {
	logs := captureLogs(t)
	_, err := ratelimit.KeyByIP(&ratelimit.IPOptions{TrustedProxies: []string{"0.0.0.0/0"}, Quiet: true})
	require.NoError(t, err)
	byIP, err := ratelimit.KeyByIP(&ratelimit.IPOptions{Quiet: true})
	require.NoError(t, err)
	serveKeys(t, byIP, 1, nil)
	assert.Zero(t, warnings(logs, "wide-trusted-range"))
	assert.Zero(t, warnings(logs, "forwarded-without-trusted-proxy"))

	logs.Reset()
	one := func(*http.Request) (string, error) { return "everyone", nil }
	serveKeys(t, one, 2*64*256, &ratelimit.MiddlewareOptions{Quiet: true})
	assert.Empty(t, logs.String())
	serveKeys(t, one, 2*64*256, nil)
	assert.Equal(t, 1, warnings(logs, "one-key"), "the same requests, not quiet")
}

// Two calendar quotas of one count but of a day and a month, or of days in
// two zones, are two limits: under one name their buckets mix. The same
// zone loaded twice is one limit.
func TestWarnSharedPolicyNameQuotas(t *testing.T) {
	first := newHarness(t, setup{policies: []ratelimit.Policy{{Name: "main", Limit: ratelimit.PerSecond(1)}}})
	zone := func(name string) *time.Location {
		loc, err := time.LoadLocation(name)
		require.NoError(t, err)
		return loc
	}
	for _, tc := range []struct {
		a, b  ratelimit.Limit
		warns bool
	}{
		{ratelimit.Daily(10, time.UTC), ratelimit.Monthly(10, time.UTC), true},
		{ratelimit.Daily(10, time.UTC), ratelimit.Daily(10, zone("Europe/Paris")), true},
		{ratelimit.Daily(10, time.UTC), ratelimit.Per(10, 24*time.Hour), true},
		{ratelimit.Daily(10, zone("Europe/Paris")), ratelimit.Daily(10, zone("Europe/Paris")), false},
		{ratelimit.Monthly(10, time.UTC), ratelimit.Monthly(10, time.UTC), false},
	} {
		plans := map[string]*ratelimit.Limiter{}
		for plan, l := range map[string]ratelimit.Limit{"a": tc.a, "b": tc.b} {
			plans[plan] = newHarness(t, setup{policies: []ratelimit.Policy{{Name: "quota", Limit: l}}, store: first.store}).lim
		}
		logger, counter := countingLogger()
		h := newHarness(t, plansSetup(first.lim, plans, ratelimit.MiddlewareOptions{Logger: logger}))
		servePlan(h, "a")
		servePlan(h, "b")
		if tc.warns {
			assert.Equal(t, map[string]int{"shared-policy-name": 1}, counter.counts(), "%v and %v", tc.a, tc.b)
		} else {
			assert.Empty(t, counter.counts(), "%v and %v", tc.a, tc.b)
		}
	}
}
