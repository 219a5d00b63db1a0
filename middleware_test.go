package ratelimit_test

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/nethttp"
)

// keyByHeader keys requests by the plain value of X-Client, for tests.
func keyByHeader(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }

// oneKey keys every request by "k".
func oneKey(*http.Request) (string, error) { return "k", nil }

// costByHeader reads the cost of a request from X-Cost (default 1).
func costByHeader(r *http.Request) (int64, error) {
	if v := r.Header.Get("X-Cost"); v != "" {
		return strconv.ParseInt(v, 10, 64)
	}
	return 1, nil
}

// field returns the first value of the header field name spelled exactly
// so, or "". The rate-limit fields go out as the drafts spell them
// ("RateLimit-Policy"), and h.Get, which canonicalises the name to
// "Ratelimit-Policy", does not find them in a handler's header map.
func field(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// setup is what newHarness builds a harness of; what is left zero has the
// default given.
type setup struct {
	limit    ratelimit.Limit    // the limit of the one policy, "default", unless policies are given
	policies []ratelimit.Policy // the limiter's policies
	// store is the limiter's store; nil: a memory store on the harness's
	// fake clock, or with realClock on the real clock (inside a synctest
	// bubble, the bubble's fake one).
	store     ratelimit.Store
	realClock bool
	wrap      func(ratelimit.Store) ratelimit.Store // if not nil, the limiter's store is wrap(store)
	limiter   *ratelimit.Limiter                    // the Middleware's limiter; nil: one of policies on store
	key       ratelimit.KeyFunc                     // nil: keyByHeader
	opts      *ratelimit.MiddlewareOptions          // passed as it is
	next      http.HandlerFunc                      // the guarded handler; nil: one that writes "ok"
}

// harness is a Middleware under test: its store and limiter, and the
// handler it guards, which counts the requests that reach it. It serves
// as an http.Handler through nethttp.Wrap.
type harness struct {
	t *testing.T
	*engine
	m *ratelimit.Middleware
	http.Handler
	calls atomic.Int64 // requests that reached the handler
}

// newHarness builds the harness of s, over the engine newEngine builds of
// it: the one builder of the tests of the HTTP half.
func newHarness(t *testing.T, s setup) *harness {
	t.Helper()
	h := &harness{t: t, engine: newEngine(t, s)}
	key := s.key
	if key == nil {
		key = keyByHeader
	}
	var err error
	h.m, err = ratelimit.NewMiddleware(h.lim, key, s.opts)
	require.NoError(t, err)
	next := s.next
	if next == nil {
		next = func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }
	}
	h.Handler = nethttp.Wrap(h.m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.calls.Add(1)
		next(w, r)
	}))
	return h
}

// serve answers r with h and returns the recorded response.
func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// get answers a GET of /geocode?q=paris from client (its X-Client, unless
// "") with the header fields of header, given as name, value pairs.
func (h *harness) get(client string, header ...string) *httptest.ResponseRecorder {
	h.t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/geocode?q=paris", nil)
	if client != "" {
		r.Header.Set("X-Client", client)
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	return serve(h, r)
}

// codes returns the statuses of n requests from client, one after another.
func (h *harness) codes(n int, client string) []int {
	h.t.Helper()
	var got []int
	for range n {
		got = append(got, h.get(client).Code)
	}
	return got
}

// handle runs r through Middleware.Handle, without nethttp, with a handler
// that answers 200 "ok", and returns the response and whether the handler
// ran.
func (h *harness) handle(r *http.Request) (w *httptest.ResponseRecorder, ran bool) {
	w = httptest.NewRecorder()
	h.m.Handle(w, r, func(*http.Request) (int, int64) {
		ran = true
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("ok"))
		return http.StatusOK, 2
	})
	return w, ran
}

func repeat(code, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = code
	}
	return s
}

// TestWorkedExampleOverHTTP is the seed's worked example: 5 per second,
// capacity 10; twelve requests at once: ten pass, two get 429 with
// Retry-After: 1; one second later five more pass.
func TestWorkedExampleOverHTTP(t *testing.T) {
	s := newHarness(t, setup{limit: ratelimit.PerSecond(5).WithBurst(10)})
	var got []int
	for i := range 12 {
		w := s.get("alice")
		got = append(got, w.Code)
		if i == 0 {
			assert.Equal(t, `"default";q=10;w=2`, field(w.Header(), "RateLimit-Policy"))
			assert.Equal(t, `"default";r=9;t=1`, field(w.Header(), "RateLimit"))
		}
		if w.Code == http.StatusTooManyRequests {
			assert.Equal(t, "1", w.Header().Get("Retry-After"))
		}
	}
	assert.Equal(t, append(repeat(200, 10), 429, 429), got)
	assert.Equal(t, int64(10), s.calls.Load(), "refused requests never reach the handler")
	assert.Equal(t, 200, s.get("bob").Code, "another client has its own bucket")

	s.clock.Advance(time.Second)
	assert.Equal(t, append(repeat(200, 5), 429), s.codes(6, "alice"), "one second later")
}

// TestExerciseOverHTTP: refill 2 per second, capacity 5, empty at T=0 (one
// request of cost 5 drains it); ten requests at T=3 s: five pass, five are
// refused.
func TestExerciseOverHTTP(t *testing.T) {
	s := newHarness(t, setup{limit: ratelimit.PerSecond(2).WithBurst(5), opts: &ratelimit.MiddlewareOptions{Cost: costByHeader}})
	require.Equal(t, 200, s.get("c", "X-Cost", "5").Code)
	s.clock.Advance(3 * time.Second)
	assert.Equal(t, append(repeat(200, 5), repeat(429, 5)...), s.codes(10, "c"))
}

var errDown = errors.New("connection refused")

type failingStore struct{ err error }

func (f failingStore) Take(context.Context, *ratelimit.Policy, string, int64) (ratelimit.Result, error) {
	return ratelimit.Result{}, f.err
}

// ctxUser is the context key of the user IDs in these tests.
type ctxUser struct{}

func header(name, value string) func(*http.Request) *http.Request {
	return func(r *http.Request) *http.Request {
		r.Header.Set(name, value)
		return r
	}
}

func userValue(v any) func(*http.Request) *http.Request {
	return func(r *http.Request) *http.Request {
		return r.WithContext(context.WithValue(r.Context(), ctxUser{}, v))
	}
}

// TestSkip: what Skip exempts (a path, a client) reaches the handler
// without limit or header fields, and spends nothing.
func TestSkip(t *testing.T) {
	s := newHarness(t, setup{limit: ratelimit.Per(1, time.Minute), opts: &ratelimit.MiddlewareOptions{Skip: func(r *http.Request) bool {
		return strings.HasPrefix(r.URL.Path, "/internal/") || r.Header.Get("X-Client") == "monitor"
	}}})
	for range 5 {
		w := s.get("monitor")
		assert.Equal(t, 200, w.Code)
		assert.Empty(t, field(w.Header(), "RateLimit"), "skipped requests carry no header fields")
	}
	r := httptest.NewRequest("GET", "/internal/stats", nil)
	r.Header.Set("X-Client", "c")
	for range 5 {
		w := serve(s, r)
		assert.Equal(t, 200, w.Code)
		assert.Empty(t, field(w.Header(), "RateLimit"))
	}
	assert.Equal(t, []int{200, 429}, s.codes(2, "c"), "skipped requests spent nothing")
	assert.Equal(t, int64(11), s.calls.Load())
}

// TestSkipSpendsNothing: a skipped client spends nothing, not even from a
// global policy, and does not reach a failing store.
func TestSkipSpendsNothing(t *testing.T) {
	monitor := &ratelimit.MiddlewareOptions{Skip: func(r *http.Request) bool { return r.Header.Get("X-Client") == "monitor" }}
	global := ratelimit.Policy{Name: "global", Limit: ratelimit.Per(3, time.Minute), Global: true}
	s := newHarness(t, setup{policies: []ratelimit.Policy{perKey, global}, opts: monitor})
	for range 10 {
		require.Equal(t, 200, s.get("monitor").Code)
	}
	assert.Equal(t, []int{200, 200, 200, 429}, s.codes(4, "c"), "the global bucket is intact")

	down := newHarness(t, setup{limit: ratelimit.Per(1, time.Minute), store: failingStore{errDown}, opts: monitor})
	assert.Equal(t, 200, down.get("monitor").Code)
	assert.Equal(t, 503, down.get("c").Code, "the store is down for everyone else")
}

// TestSkipByAPIKey: an internal caller known by its API key is exempt
// (what WithExemptKeys did); the key is compared in constant time.
func TestSkipByAPIKey(t *testing.T) {
	internal := func(r *http.Request) bool {
		return subtle.ConstantTimeCompare([]byte(r.Header.Get("X-API-Key")), []byte("internal-secret")) == 1
	}
	h := newHarness(t, setup{limit: ratelimit.Per(1, time.Minute), key: ratelimit.KeyByAPIKey("X-API-Key"), opts: &ratelimit.MiddlewareOptions{Skip: internal}})
	get := func(apiKey string) int { return h.get("", "X-API-Key", apiKey).Code }
	for range 3 {
		assert.Equal(t, 200, get("internal-secret"))
	}
	assert.Equal(t, []int{200, 429}, []int{get("customer"), get("customer")}, "other keys are limited")
}

func TestPanickingKeyFunction(t *testing.T) {
	h := newHarness(t, setup{limit: ratelimit.PerSecond(1), key: func(*http.Request) (string, error) { panic("boom") }})
	w := serve(h, httptest.NewRequest("GET", "/", nil))
	assert.Equal(t, 500, w.Code)
	assert.NotContains(t, w.Body.String(), "boom")
	assert.Zero(t, h.calls.Load())
}

// A panicking cost function is a clean 500 too, and an error handler of
// one's own sees ErrPanic and chooses the answer; the next handler never
// runs and the server goes on.
func TestPanickingCostFunction(t *testing.T) {
	boom := func(*http.Request) (int64, error) { panic("boom") }

	h := newHarness(t, setup{limit: ratelimit.PerSecond(1), key: oneKey, opts: &ratelimit.MiddlewareOptions{Cost: boom}})
	w := serve(h, httptest.NewRequest("GET", "/", nil))
	assert.Equal(t, 500, w.Code)
	assert.NotContains(t, w.Body.String(), "boom")

	var seen error
	h = newHarness(t, setup{limiter: h.lim, key: oneKey, opts: &ratelimit.MiddlewareOptions{Cost: boom, OnError: func(w http.ResponseWriter, r *http.Request, err error) {
		seen = err
		w.WriteHeader(http.StatusServiceUnavailable)
	}}})
	w = serve(h, httptest.NewRequest("GET", "/", nil))
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.ErrorIs(t, seen, ratelimit.ErrPanic)
	assert.Zero(t, h.calls.Load())
}

// TestHandleConcurrentExactCount: 40 requests at once on one key, burst
// 10, on a clock that does not move: exactly 10 are admitted (their
// handlers run, each with a distinct remaining count 0 to 9) and exactly
// 30 are refused with 429.
func TestHandleConcurrentExactCount(t *testing.T) {
	const n, burst = 40, 10
	h := newHarness(t, setup{limit: ratelimit.Per(burst, time.Minute)})

	var (
		wg        sync.WaitGroup
		start     = make(chan struct{})
		ran       atomic.Int64
		codes     [n]int
		remaining [n]string
		ranOK     [n]bool
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("X-Client", "one-key")
			<-start
			w, ok := h.handle(r)
			if ok {
				ran.Add(1)
			}
			codes[i], remaining[i], ranOK[i] = w.Code, field(w.Header(), "RateLimit"), ok
			if w.Code == http.StatusTooManyRequests {
				assert.Equal(t, "6", w.Header().Get("Retry-After"), "request %d", i)
			}
		}()
	}
	close(start)
	wg.Wait()

	admitted, refused := 0, 0
	var rs []string
	for i, code := range codes {
		switch code {
		case http.StatusOK:
			admitted++
			assert.True(t, ranOK[i], "request %d: admitted, so its handler ran", i)
			rs = append(rs, remaining[i])
		case http.StatusTooManyRequests:
			refused++
			assert.False(t, ranOK[i], "request %d: refused, so its handler did not run", i)
			assert.Equal(t, `"default";r=0;t=6`, remaining[i], "request %d", i)
		default:
			t.Errorf("request %d: status %d", i, code)
		}
	}
	assert.Equal(t, burst, admitted, "admitted")
	assert.Equal(t, n-burst, refused, "refused")
	assert.EqualValues(t, burst, ran.Load(), "handlers run")
	var want []string
	for r := range burst {
		want = append(want, fmt.Sprintf(`"default";r=%d;t=6`, r))
	}
	slices.Sort(rs)
	slices.Sort(want)
	assert.Equal(t, want, rs, "each admitted request saw its own decision")
}

// TestSkipRunsBeforeKey: MiddlewareOptions.Skip is asked before the key function, so
// a skipped request without a key, or whose key function fails or panics,
// is admitted and reaches its handler; the key function is not even called.
// The same requests, not skipped, are answered as errors.
func TestSkipRunsBeforeKey(t *testing.T) {
	for _, tc := range []struct {
		name   string
		key    ratelimit.KeyFunc
		status int // when not skipped
	}{
		{"no key", ratelimit.KeyByAPIKey("X-API-Key"), http.StatusUnauthorized},
		{"empty key", func(*http.Request) (string, error) { return "", nil }, http.StatusUnauthorized},
		{"failing key function", func(*http.Request) (string, error) { return "", errors.New("no session") }, http.StatusInternalServerError},
		{"panicking key function", func(*http.Request) (string, error) { panic("key function panics") }, http.StatusInternalServerError},
	} {
		var keyCalls atomic.Int64
		key := func(r *http.Request) (string, error) {
			keyCalls.Add(1)
			return tc.key(r)
		}
		h := newHarness(t, setup{limit: ratelimit.Per(1, time.Minute), key: key, opts: &ratelimit.MiddlewareOptions{
			Skip:   func(r *http.Request) bool { return r.URL.Path == "/healthz" },
			Logger: discardLogger(),
		}})
		for range 3 {
			w, ran := h.handle(httptest.NewRequest(http.MethodGet, "/healthz", nil))
			assert.Equal(t, http.StatusOK, w.Code, "%s: skipped", tc.name)
			assert.True(t, ran, "%s: the handler of a skipped request runs", tc.name)
			assert.Equal(t, "ok", w.Body.String(), tc.name)
			for name := range w.Header() {
				assert.NotContains(t, strings.ToLower(name), "ratelimit", "%s: a skipped request is not decided", tc.name)
			}
		}
		assert.Zero(t, keyCalls.Load(), "%s: the key function is not called for a skipped request", tc.name)

		w, ran := h.handle(httptest.NewRequest(http.MethodGet, "/geocode", nil))
		assert.Equal(t, tc.status, w.Code, "%s: not skipped", tc.name)
		assert.False(t, ran, "%s: not skipped, the handler does not run", tc.name)
		assert.EqualValues(t, 1, keyCalls.Load(), tc.name)
	}
}

// discardLogger is a logger that writes nothing.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// A panic in MiddlewareOptions.Skip is answered like one in the key function: 500,
// through the error handler with ErrPanic, and the handler never runs;
// Observe is told, as of every request that fails before its decision.
func TestSkipPanics(t *testing.T) {
	var got error
	var observed []ratelimit.Event
	h := newHarness(t, setup{limit: ratelimit.PerSecond(5), store: handBuiltStore{}, opts: &ratelimit.MiddlewareOptions{
		Skip:    func(*http.Request) bool { panic("boom") },
		OnError: func(w http.ResponseWriter, r *http.Request, err error) { got = err; w.WriteHeader(500) },
		Observe: func(_ *http.Request, e ratelimit.Event) { observed = append(observed, e) },
	}})
	w, ran := h.handle(httptest.NewRequest("GET", "/", nil))
	assert.False(t, ran)
	assert.Equal(t, 500, w.Code)
	assert.ErrorIs(t, got, ratelimit.ErrPanic)
	assert.ErrorContains(t, got, "boom")
	require.Len(t, observed, 1, "Observe is told of the failure")
	assert.Same(t, h.lim, observed[0].Limiter)
	assert.ErrorIs(t, observed[0].Err, ratelimit.ErrPanic)
}

// TestCostBelowOneIsRefused: a cost of 0 would only look at the bucket, so
// a client that can pick it (?count=0) would pass an empty bucket at will.
func TestCostBelowOneIsRefused(t *testing.T) {
	s := newHarness(t, setup{policies: []ratelimit.Policy{perKey}, opts: &ratelimit.MiddlewareOptions{Cost: costByHeader}})
	require.Equal(t, 200, s.get("a", "X-Cost", "10").Code)
	require.Equal(t, 429, s.get("a").Code, "the bucket is empty")
	for _, cost := range []string{"0", "-1"} {
		for range 100 {
			w := s.get("a", "X-Cost", cost)
			require.Equal(t, http.StatusBadRequest, w.Code, "cost %s", cost)
		}
		w := s.get("a", "X-Cost", cost)
		assert.Contains(t, w.Body.String(), "the request's cost, "+cost+", is ")
	}
	assert.Equal(t, int64(1), s.calls.Load(), "only the first request reached the handler")
}

// TestTiers: one middleware, a limiter per plan chosen per request.
func TestTiers(t *testing.T) {
	var pro *ratelimit.Limiter
	s := newHarness(t, setup{
		policies: []ratelimit.Policy{{Name: "free", Limit: ratelimit.Per(2, time.Minute)}},
		opts: &ratelimit.MiddlewareOptions{LimiterFor: func(r *http.Request) *ratelimit.Limiter {
			if r.Header.Get("X-Plan") == "pro" {
				return pro
			}
			return nil
		}},
	})
	pro = newHarness(t, setup{policies: []ratelimit.Policy{{Name: "pro", Limit: ratelimit.Per(5, time.Minute)}}, store: s.store}).lim
	var freeCodes, proCodes []int
	for range 6 {
		freeCodes = append(freeCodes, s.get("x").Code)
		proCodes = append(proCodes, s.get("y", "X-Plan", "pro").Code)
	}
	assert.Equal(t, []int{200, 200, 429, 429, 429, 429}, freeCodes)
	assert.Equal(t, []int{200, 200, 200, 200, 200, 429}, proCodes)
	assert.Equal(t, `"pro";q=5;w=60`, field(s.get("z", "X-Plan", "pro").Header(), "RateLimit-Policy"))
}
