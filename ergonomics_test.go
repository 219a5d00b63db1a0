package ratelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
	"github.com/tokenfair/ratelimit/storetest"
)

// loginServer is the login guard: five failed logins a minute per client;
// a successful login (password "right") is not counted.
func loginServer(t *testing.T) (http.Handler, *ratelimit.Limiter, *atomic.Int64) {
	t.Helper()
	store, err := memorystore.New(memorystore.WithClock(new(storetest.Clock).Now), memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	lim, err := ratelimit.New(store, ratelimit.Policy{Name: "logins", Limit: ratelimit.PerMinute(5)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, ratelimit.WithCountIf(ratelimit.Failed))
	require.NoError(t, err)
	var failures atomic.Int64
	h := nethttp.Middleware(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Password") != "right" {
			failures.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Write([]byte("welcome"))
	}))
	return h, lim, &failures
}

func login(h http.Handler, client, password string) int {
	r := httptest.NewRequest("POST", "/login", nil)
	r.Header.Set("X-Client", client)
	r.Header.Set("X-Password", password)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

func TestLoginGuard(t *testing.T) {
	h, _, _ := loginServer(t)
	for range 20 {
		require.Equal(t, 200, login(h, "alice", "right"), "successful logins are never counted")
	}
	var codes []int
	for range 6 {
		codes = append(codes, login(h, "alice", "wrong"))
	}
	assert.Equal(t, []int{401, 401, 401, 401, 401, 429}, codes, "five failed logins, then 429")
	assert.Equal(t, 429, login(h, "alice", "right"), "once the budget is spent, every login waits")
	assert.Equal(t, 200, login(h, "bob", "right"), "another client is unaffected")
}

func TestLoginGuardConcurrent(t *testing.T) {
	h, lim, failures := loginServer(t)
	var wg sync.WaitGroup
	var refused atomic.Int64
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			password := "right"
			if i%2 == 0 {
				password = "wrong"
			}
			if login(h, "mallory", password) == 429 {
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, failures.Load(), int64(5), "never more than five failed attempts reach the handler")
	assert.Positive(t, refused.Load())
	res, err := lim.Take(context.Background(), "mallory", 0)
	require.NoError(t, err)
	assert.Equal(t, 5-failures.Load(), res.Remaining, "successful logins gave their tokens back; failures kept theirs")
}

func TestSkipAndExempt(t *testing.T) {
	s := newServer(t, ratelimit.PerMinute(1), nil,
		ratelimit.WithSkip(func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/internal/") }),
		ratelimit.WithExemptKeys("monitor"))
	for range 5 {
		w := s.get("monitor")
		assert.Equal(t, 200, w.Code)
		assert.Empty(t, w.Header().Get("RateLimit"), "exempt requests carry no header fields")
	}
	r := httptest.NewRequest("GET", "/internal/stats", nil)
	r.Header.Set("X-Client", "c")
	for range 5 {
		w := httptest.NewRecorder()
		s.handler.ServeHTTP(w, r)
		assert.Equal(t, 200, w.Code)
		assert.Empty(t, w.Header().Get("RateLimit"))
	}
	assert.Equal(t, []int{200, 429}, s.codes(2, "c"), "skipped requests spent nothing")
	assert.Equal(t, 11, s.calls)
}

// TestExemptSpendsNothing: an exempt key spends nothing, not even from a
// global policy, and does not reach a failing store.
func TestExemptSpendsNothing(t *testing.T) {
	global := ratelimit.Policy{Name: "global", Limit: ratelimit.PerMinute(3), Global: true}
	s := policyServer(t, []ratelimit.Policy{perKey, global}, ratelimit.WithExemptKeys("monitor"))
	for range 10 {
		require.Equal(t, 200, s.get("monitor").Code)
	}
	assert.Equal(t, []int{200, 200, 200, 429}, s.codes(4, "c"), "the global bucket is intact")

	down := newServer(t, ratelimit.PerMinute(1), failingStore{errDown}, ratelimit.WithExemptKeys("monitor"))
	assert.Equal(t, 200, down.get("monitor").Code)
}

func TestExemptAPIKey(t *testing.T) {
	store, err := memorystore.New(memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerMinute(1)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, ratelimit.KeyByAPIKey("X-API-Key"), ratelimit.WithExemptKeys(ratelimit.APIKey("internal-secret")))
	require.NoError(t, err)
	h := nethttp.Middleware(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", "internal-secret")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		assert.Equal(t, 200, w.Code)
	}
}

func TestInFlight(t *testing.T) {
	store, err := memorystore.New(memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(1000).WithBurst(1000)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, ratelimit.WithMaxInFlight(3, 0))
	require.NoError(t, err)
	var running, peak atomic.Int64
	gate := make(chan struct{})
	h := nethttp.Middleware(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		switch r.URL.Path {
		case "/panic":
			panic(http.ErrAbortHandler)
		case "/wait":
			select {
			case <-gate:
			case <-r.Context().Done():
			}
		case "/hang":
			<-r.Context().Done()
		}
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string) *http.Response {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("X-Client", "c")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil
		}
		resp.Body.Close()
		return resp
	}

	// Five slow requests at once: exactly three run; two are refused.
	var wg sync.WaitGroup
	codes := make(chan int, 5)
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp := get("/wait"); resp != nil {
				codes <- resp.StatusCode
			}
		}()
	}
	require.Eventually(t, func() bool { return len(codes) == 2 }, 5*time.Second, time.Millisecond)
	refusal := get("/")
	require.NotNil(t, refusal)
	assert.Equal(t, 429, refusal.StatusCode)
	assert.Equal(t, []string{`"default";q=1000;w=1`, `"inflight";q=3;qu="concurrent-requests"`}, refusal.Header.Values("RateLimit-Policy"))
	assert.Equal(t, `"inflight";r=0;t=1`, refusal.Header.Get("RateLimit"))
	close(gate)
	wg.Wait()
	close(codes)
	var got []int
	for c := range codes {
		got = append(got, c)
	}
	assert.ElementsMatch(t, []int{429, 429, 200, 200, 200}, got)
	assert.Equal(t, int64(3), peak.Load())

	// Slots come back after panics and after clients that went away.
	for range 5 {
		get("/panic")
	}
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/hang", nil)
		req.Header.Set("X-Client", "c")
		_, err := http.DefaultClient.Do(req)
		cancel()
		require.Error(t, err)
	}
	require.Eventually(t, func() bool { return running.Load() == 0 }, 5*time.Second, time.Millisecond)
	for range 3 {
		resp := get("/")
		require.NotNil(t, resp)
		assert.Equal(t, 200, resp.StatusCode, "every slot came back")
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestPanickingKeyFunction(t *testing.T) {
	store, err := memorystore.New(memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, func(*http.Request) (string, error) { panic("boom") })
	require.NoError(t, err)
	w := httptest.NewRecorder()
	nethttp.Middleware(m)(http.NotFoundHandler()).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	assert.Equal(t, 500, w.Code)
	assert.NotContains(t, w.Body.String(), "boom")
}

// A panicking cost function is a clean 500 too, and an error handler of
// one's own sees ErrPanic and chooses the answer; the next handler never
// runs and the server goes on.
func TestPanickingCostFunction(t *testing.T) {
	store, err := memorystore.New(memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	require.NoError(t, err)
	oneKey := func(*http.Request) (string, error) { return "k", nil }
	boom := ratelimit.WithCost(func(*http.Request) (int64, error) { panic("boom") })
	ran := false
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })

	m, err := ratelimit.NewMiddleware(lim, oneKey, boom)
	require.NoError(t, err)
	w := httptest.NewRecorder()
	nethttp.Middleware(m)(next).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	assert.Equal(t, 500, w.Code)
	assert.NotContains(t, w.Body.String(), "boom")

	var seen error
	m, err = ratelimit.NewMiddleware(lim, oneKey, boom, ratelimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
		seen = err
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	require.NoError(t, err)
	w = httptest.NewRecorder()
	nethttp.Middleware(m)(next).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.ErrorIs(t, seen, ratelimit.ErrPanic)
	assert.False(t, ran)
}

type failingSlots struct{}

func (failingSlots) Acquire(context.Context, string, int64, time.Duration) (string, bool, error) {
	return "", false, errDown
}
func (failingSlots) Release(context.Context, string, string) error { return errDown }

func TestSlotStoreFailure(t *testing.T) {
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerMinute(5)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, ratelimit.WithMaxInFlight(1, 0), ratelimit.WithSlotStore(failingSlots{}, time.Minute))
	require.NoError(t, err)
	calls := 0
	s := &server{t: t, handler: nethttp.Middleware(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls++ }))}
	for range 3 {
		w := s.get("c")
		assert.Equal(t, http.StatusServiceUnavailable, w.Code)
		assert.Empty(t, w.Header().Get("RateLimit"), "no decision was answered")
	}
	assert.Zero(t, calls)
	res, err := lim.Take(context.Background(), "c", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(5), res.Remaining, "the tokens taken before each failure were given back")

	for _, opt := range []ratelimit.Option{ratelimit.WithSlotStore(nil, time.Second), ratelimit.WithSlotStore(failingSlots{}, 0), ratelimit.WithMaxInFlight(0, 0), ratelimit.WithMaxInFlight(-1, 2)} {
		_, err := ratelimit.NewMiddleware(lim, keyByHeader, opt)
		assert.Error(t, err)
	}
}

type recordingObserver struct{ events []ratelimit.Event }

func (o *recordingObserver) Observe(_ *http.Request, ev ratelimit.Event) {
	o.events = append(o.events, ev)
}

// TestInFlightRefusalObserved: an in-flight refusal reaches the Observer as
// a refusal by the "inflight" policy.
func TestInFlightRefusalObserved(t *testing.T) {
	obs := &recordingObserver{}
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerMinute(5)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, ratelimit.WithMaxInFlight(1, 0), ratelimit.WithObserver(obs))
	require.NoError(t, err)
	var h http.Handler
	inner := 0
	h = nethttp.Middleware(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/outer" {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/inner", nil).WithContext(r.Context()))
			inner = rec.Code
		}
	}))
	r := httptest.NewRequest("GET", "/outer", nil)
	r.Header.Set("X-Client", "c")
	h.ServeHTTP(httptest.NewRecorder(), r)
	require.Len(t, obs.events, 2)
	assert.Equal(t, 500, inner, "the inner request has no X-Client")

	obs.events = nil
	h = nethttp.Middleware(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/outer" {
			in := httptest.NewRequest("GET", "/inner", nil)
			in.Header.Set("X-Client", "c")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, in)
			inner = rec.Code
		}
	}))
	h.ServeHTTP(httptest.NewRecorder(), r)
	assert.Equal(t, 429, inner)
	require.Len(t, obs.events, 2)
	assert.True(t, obs.events[0].Result.Allowed)
	assert.False(t, obs.events[1].Result.Allowed)
	assert.Equal(t, []string{ratelimit.InFlightPolicyName}, obs.events[1].Result.Violated())
}

func TestAllDryRunWritesNoHeaders(t *testing.T) {
	shadow := ratelimit.Policy{Name: "shadow", Limit: ratelimit.PerMinute(1), DryRun: true}
	for _, format := range []ratelimit.HeaderFormat{ratelimit.HeadersIETF, ratelimit.HeadersLegacy, ratelimit.HeadersX} {
		s := policyServer(t, []ratelimit.Policy{shadow}, ratelimit.WithHeaders(format))
		for range 3 {
			w := s.get("c")
			assert.Equal(t, 200, w.Code)
			for name := range w.Header() {
				assert.NotContains(t, strings.ToLower(name), "ratelimit", "format %v wrote %s", format, name)
			}
		}
	}
}

// TestInFlightTotal: a total in-flight limit holds across keys: with two
// slots in all, a third client is refused while two requests run, whatever
// its own per-key room, and admitted once one of them ends.
func TestInFlightTotal(t *testing.T) {
	store, err := memorystore.New(memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(1000).WithBurst(1000)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, ratelimit.WithMaxInFlight(5, 2))
	require.NoError(t, err)
	entered, release := make(chan struct{}), make(chan struct{})
	h := nethttp.Middleware(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			entered <- struct{}{}
			<-release
		}
	}))
	serve := func(client, path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set("X-Client", client)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	done := make(chan int, 2)
	for _, client := range []string{"a", "b"} {
		go func() { done <- serve(client, "/wait").Code }()
		<-entered
	}
	refused := serve("c", "/")
	assert.Equal(t, http.StatusTooManyRequests, refused.Code)
	assert.Contains(t, refused.Header().Values("RateLimit-Policy"), `"inflight";q=2;qu="concurrent-requests"`, "the binding quota is the total")
	release <- struct{}{}
	assert.Equal(t, http.StatusOK, <-done)
	assert.Equal(t, http.StatusOK, serve("c", "/").Code, "a slot came back")
	close(release)
	assert.Equal(t, http.StatusOK, <-done)
}
