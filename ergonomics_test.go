package ratelimit_test

import (
	"context"
	"crypto/subtle"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/refusers"
	"github.com/tokenfair/ratelimit/nethttp"
)

// loginServer is the login guard: five failed logins a minute per client;
// a successful login (password "right") is not counted.
func loginServer(t *testing.T) (http.Handler, *ratelimit.Limiter, *atomic.Int64) {
	t.Helper()
	lim, err := ratelimit.New(clockStore(t, new(fakeClock)), ratelimit.Policy{Name: "logins", Limit: ratelimit.Per(5, time.Minute)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{CountIf: func(status int) bool { return status >= 400 }})
	require.NoError(t, err)
	require.True(t, m.CountsResponses())
	var failures atomic.Int64
	h := nethttp.Wrap(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

// TestLoginGuardBanksNothing is the banking attack on the login guard: a
// client holds five successful (uncounted) logins open, lets the bucket
// refill, spends five failures, then lets the open ones finish. Their
// give-backs must credit nothing: the bucket has been full since they were
// taken. (It admitted five more failures at the same instant: ten with a
// burst of five.) A reset followed by the give-backs banks nothing either.
func TestLoginGuardBanksNothing(t *testing.T) {
	for _, reset := range []bool{false, true} {
		clock := new(fakeClock)
		lim, err := ratelimit.New(clockStore(t, clock), ratelimit.Policy{Name: "logins", Limit: ratelimit.Per(5, time.Minute)})
		require.NoError(t, err)
		m, err := ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{CountIf: func(status int) bool { return status >= 400 }})
		require.NoError(t, err)
		entered, release := make(chan struct{}), make(chan struct{})
		h := nethttp.Wrap(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Password") == "right" {
				entered <- struct{}{}
				<-release // held open
				return
			}
			w.WriteHeader(http.StatusUnauthorized)
		}))
		var open sync.WaitGroup
		for range 5 {
			open.Go(func() { assert.Equal(t, 200, login(h, "mallory", "right")) })
			<-entered
		}
		if reset {
			require.NoError(t, lim.Reset(context.Background(), "mallory"))
		} else {
			clock.Advance(time.Minute) // full again
		}
		var codes []int
		for range 5 {
			codes = append(codes, login(h, "mallory", "wrong"))
		}
		require.Equal(t, []int{401, 401, 401, 401, 401}, codes)
		close(release)
		open.Wait()
		codes = nil
		for range 5 {
			codes = append(codes, login(h, "mallory", "wrong"))
		}
		assert.Equal(t, []int{429, 429, 429, 429, 429}, codes, "reset %v: the open requests banked nothing", reset)
	}
}

// A request whose handler panics under CountIf gets its cost back: its
// status never came, so it cannot count.
func TestCountIfPanicGivesBack(t *testing.T) {
	lim, err := ratelimit.New(clockStore(t, new(fakeClock)), ratelimit.Policy{Name: "logins", Limit: ratelimit.Per(5, time.Minute)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{CountIf: func(int) bool { return true }})
	require.NoError(t, err)
	r := httptest.NewRequest("POST", "/login", nil)
	r.Header.Set("X-Client", "alice")
	for range 10 {
		assert.PanicsWithValue(t, "boom", func() { m.Handle(httptest.NewRecorder(), r, func(*http.Request) int { panic("boom") }) })
	}
	res, err := lim.Take(context.Background(), "alice", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(5), res.Remaining, "every panicking request gave its token back")
	m.Handle(httptest.NewRecorder(), r, func(*http.Request) int { return 200 })
	res, err = lim.Take(context.Background(), "alice", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(4), res.Remaining, "a counted request keeps its token")
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

// TestSkip: what Skip exempts (a path, a client) reaches the handler
// without limit or header fields, and spends nothing.
func TestSkip(t *testing.T) {
	s := newServer(t, ratelimit.Per(1, time.Minute), nil, &ratelimit.MiddlewareOptions{Skip: func(r *http.Request) bool {
		return strings.HasPrefix(r.URL.Path, "/internal/") || r.Header.Get("X-Client") == "monitor"
	}})
	for range 5 {
		w := s.get("monitor")
		assert.Equal(t, 200, w.Code)
		assert.Empty(t, field(w.Header(), "RateLimit"), "skipped requests carry no header fields")
	}
	r := httptest.NewRequest("GET", "/internal/stats", nil)
	r.Header.Set("X-Client", "c")
	for range 5 {
		w := httptest.NewRecorder()
		s.handler.ServeHTTP(w, r)
		assert.Equal(t, 200, w.Code)
		assert.Empty(t, field(w.Header(), "RateLimit"))
	}
	assert.Equal(t, []int{200, 429}, s.codes(2, "c"), "skipped requests spent nothing")
	assert.Equal(t, 11, s.calls)
}

// TestSkipSpendsNothing: a skipped client spends nothing, not even from a
// global policy, and does not reach a failing store.
func TestSkipSpendsNothing(t *testing.T) {
	monitor := &ratelimit.MiddlewareOptions{Skip: func(r *http.Request) bool { return r.Header.Get("X-Client") == "monitor" }}
	global := ratelimit.Policy{Name: "global", Limit: ratelimit.Per(3, time.Minute), Global: true}
	s := policyServer(t, []ratelimit.Policy{perKey, global}, monitor)
	for range 10 {
		require.Equal(t, 200, s.get("monitor").Code)
	}
	assert.Equal(t, []int{200, 200, 200, 429}, s.codes(4, "c"), "the global bucket is intact")

	down := newServer(t, ratelimit.Per(1, time.Minute), failingStore{errDown}, monitor)
	assert.Equal(t, 200, down.get("monitor").Code)
	assert.Equal(t, 503, down.get("c").Code, "the store is down for everyone else")
}

// TestSkipByAPIKey: an internal caller known by its API key is exempt
// (what WithExemptKeys did); the key is compared in constant time.
func TestSkipByAPIKey(t *testing.T) {
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.Per(1, time.Minute)})
	require.NoError(t, err)
	internal := func(r *http.Request) bool {
		return subtle.ConstantTimeCompare([]byte(r.Header.Get("X-API-Key")), []byte("internal-secret")) == 1
	}
	m, err := ratelimit.NewMiddleware(lim, ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{Skip: internal})
	require.NoError(t, err)
	h := nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	serve := func(apiKey string) int {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", apiKey)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for range 3 {
		assert.Equal(t, 200, serve("internal-secret"))
	}
	assert.Equal(t, []int{200, 429}, []int{serve("customer"), serve("customer")}, "other keys are limited")
}

// TestInFlight: MaxInFlight admits at most three requests of a key at once,
// names the in-flight policy in a refusal, and frees a slot when the
// handler returns, panics, or ends because the client went away.
func TestInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(1000)})
		require.NoError(t, err)
		m, err := ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{MaxInFlight: 3})
		require.NoError(t, err)
		var running, peak atomic.Int64
		gate := make(chan struct{})
		h := nethttp.Wrap(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := running.Add(1)
			defer running.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			switch r.URL.Path {
			case "/panic":
				panic(http.ErrAbortHandler)
			case "/wait":
				<-gate
			case "/hang":
				<-r.Context().Done()
			}
		}))
		serve := func(ctx context.Context, path string) (w *httptest.ResponseRecorder) {
			w = httptest.NewRecorder()
			defer func() {
				if p := recover(); p != nil && p != http.ErrAbortHandler {
					panic(p)
				}
			}()
			r := httptest.NewRequestWithContext(ctx, "GET", path, nil)
			r.Header.Set("X-Client", "c")
			h.ServeHTTP(w, r)
			return w
		}
		ctx := context.Background()

		// Five slow requests at once: exactly three run; two are refused.
		var wg sync.WaitGroup
		codes := make(chan int, 5)
		for range 5 {
			wg.Go(func() { codes <- serve(ctx, "/wait").Code })
		}
		synctest.Wait()
		require.Len(t, codes, 2, "two refused at once, three running")
		assert.Equal(t, int64(3), running.Load())
		refusal := serve(ctx, "/")
		assert.Equal(t, 429, refusal.Code)
		assert.Equal(t, "1", refusal.Header().Get("Retry-After"))
		assert.Equal(t, []string{`"default";q=1000;w=1,"inflight";q=3;qu="concurrent-requests"`}, refusal.Header()["RateLimit-Policy"], "one field line, so that Get sees the in-flight limit too")
		assert.Equal(t, `"inflight";r=0;t=1`, field(refusal.Header(), "RateLimit"))
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
			serve(ctx, "/panic")
		}
		for range 3 {
			ctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			start := time.Now()
			serve(ctx, "/hang")
			assert.Equal(t, 20*time.Millisecond, time.Since(start), "the handler ends when the client leaves")
			cancel()
		}
		assert.Zero(t, running.Load())
		for range 3 {
			assert.Equal(t, 200, serve(ctx, "/").Code, "every slot came back")
		}
	})
}

func TestPanickingKeyFunction(t *testing.T) {
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, func(*http.Request) (string, error) { panic("boom") }, nil)
	require.NoError(t, err)
	w := httptest.NewRecorder()
	nethttp.Wrap(m)(http.NotFoundHandler()).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	assert.Equal(t, 500, w.Code)
	assert.NotContains(t, w.Body.String(), "boom")
}

// A panicking cost function is a clean 500 too, and an error handler of
// one's own sees ErrPanic and chooses the answer; the next handler never
// runs and the server goes on.
func TestPanickingCostFunction(t *testing.T) {
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	require.NoError(t, err)
	oneKey := func(*http.Request) (string, error) { return "k", nil }
	boom := func(*http.Request) (int64, error) { panic("boom") }
	ran := false
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })

	m, err := ratelimit.NewMiddleware(lim, oneKey, &ratelimit.MiddlewareOptions{Cost: boom})
	require.NoError(t, err)
	w := httptest.NewRecorder()
	nethttp.Wrap(m)(next).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	assert.Equal(t, 500, w.Code)
	assert.NotContains(t, w.Body.String(), "boom")

	var seen error
	m, err = ratelimit.NewMiddleware(lim, oneKey, &ratelimit.MiddlewareOptions{Cost: boom, OnError: func(w http.ResponseWriter, r *http.Request, err error) {
		seen = err
		w.WriteHeader(http.StatusServiceUnavailable)
	}})
	require.NoError(t, err)
	w = httptest.NewRecorder()
	nethttp.Wrap(m)(next).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.ErrorIs(t, seen, ratelimit.ErrPanic)
	assert.False(t, ran)
}

type failingSlots struct{}

func (failingSlots) Acquire(context.Context, string, string, int64, time.Duration) (bool, error) {
	return false, errDown
}
func (failingSlots) Release(context.Context, string, string) error { return errDown }

func TestSlotStoreFailure(t *testing.T) {
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.Per(5, time.Minute)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{MaxInFlight: 1, Slots: failingSlots{}, SlotLease: time.Minute, SlotName: "api"})
	require.NoError(t, err)
	calls := 0
	s := &server{t: t, handler: nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls++ }))}
	for range 3 {
		w := s.get("c")
		assert.Equal(t, http.StatusServiceUnavailable, w.Code)
		assert.Empty(t, field(w.Header(), "RateLimit"), "no decision was answered")
	}
	assert.Zero(t, calls)
	res, err := lim.Take(context.Background(), "c", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(5), res.Remaining, "the tokens taken before each failure were given back")

	for _, opts := range []ratelimit.MiddlewareOptions{
		{MaxInFlight: 1, Slots: failingSlots{}},                               // no lease
		{Slots: failingSlots{}, SlotLease: time.Second},                       // no limit
		{MaxInFlightTotal: 1, Slots: failingSlots{}, SlotLease: -time.Second}, // negative lease
		{MaxInFlight: -1, MaxInFlightTotal: 2},
	} {
		_, err := ratelimit.NewMiddleware(lim, keyByHeader, &opts)
		assert.Error(t, err, "%+v", opts)
	}
}

type recordingObserver struct{ events []ratelimit.Event }

func (o *recordingObserver) Observe(_ *http.Request, ev ratelimit.Event) {
	o.events = append(o.events, ev)
}

// TestInFlightRefusalObserved: an in-flight refusal reaches MiddlewareOptions.Observe as
// a refusal by the "inflight" policy.
func TestInFlightRefusalObserved(t *testing.T) {
	obs := &recordingObserver{}
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.Per(5, time.Minute)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{MaxInFlight: 1, Observe: obs.Observe})
	require.NoError(t, err)
	var h http.Handler
	inner := 0
	h = nethttp.Wrap(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	assert.Equal(t, 401, inner, "the inner request has no X-Client")
	assert.NoError(t, obs.events[0].Err, "the outer request is observed before its handler runs")
	assert.ErrorIs(t, obs.events[1].Err, ratelimit.ErrMissingKey)

	obs.events = nil
	h = nethttp.Wrap(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	assert.Same(t, lim, obs.events[0].Limiter)
	assert.Equal(t, "default", obs.events[0].Result.Policy.Name)
	assert.False(t, obs.events[1].Result.Allowed)
	assert.Equal(t, []string{"inflight"}, refusers.Names(obs.events[1].Result, false))
	assert.Equal(t, "inflight", obs.events[1].Result.Policy.Name)
	assert.Equal(t, time.Second, obs.events[1].Result.RetryAfter)
	assert.Same(t, lim, obs.events[1].Limiter)
}

func TestAllDryRunWritesNoHeaders(t *testing.T) {
	shadow := ratelimit.Policy{Name: "shadow", Limit: ratelimit.Per(1, time.Minute), DryRun: true}
	for _, format := range []ratelimit.HeaderFormat{ratelimit.HeadersIETF, ratelimit.HeadersLegacy, ratelimit.HeadersX} {
		s := policyServer(t, []ratelimit.Policy{shadow}, &ratelimit.MiddlewareOptions{Headers: format})
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
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(1000)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{MaxInFlight: 5, MaxInFlightTotal: 2})
	require.NoError(t, err)
	entered, release := make(chan struct{}), make(chan struct{})
	h := nethttp.Wrap(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	assert.Contains(t, field(refused.Header(), "RateLimit-Policy"), `,"inflight";q=2;qu="concurrent-requests"`, "the binding quota is the total")
	release <- struct{}{}
	assert.Equal(t, http.StatusOK, <-done)
	assert.Equal(t, http.StatusOK, serve("c", "/").Code, "a slot came back")
	close(release)
	assert.Equal(t, http.StatusOK, <-done)
}

// TestInFlightQuotaIsAnSFInteger: a limit too large for a Structured Field
// Integer (15 digits at most, RFC 9651) is sent clamped, as policies' are,
// so that strict parsers still read the field.
func TestInFlightQuotaIsAnSFInteger(t *testing.T) {
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(10)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{MaxInFlightTotal: math.MaxInt})
	require.NoError(t, err)
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Client", "a")
	nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, r)
	assert.Equal(t, `"default";q=10;w=1,"inflight";q=999999999999999;qu="concurrent-requests"`, field(w.Header(), "RateLimit-Policy"))
}
