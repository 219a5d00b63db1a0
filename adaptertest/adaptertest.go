// Package adaptertest is a conformance suite for the framework adapters of
// [ratelimit.Middleware]. Every adapter in this project passes it (nethttp,
// and the ginlimit and echolimit modules), and so should yours:
//
//	func TestConformance(t *testing.T) {
//		adaptertest.Run(t, func(t *testing.T, l *ratelimit.Limiter, key ratelimit.KeyFunc,
//			opts []ratelimit.Option, next http.Handler) http.Handler {
//			m, err := ratelimit.NewMiddleware(l, key, opts...)
//			require.NoError(t, err)
//			engine := myframework.New()
//			engine.Use(myadapter.Middleware(m))
//			engine.Any("/*", myframework.Wrap(next))
//			return engine
//		})
//	}
//
// The suite builds the limiters, stores and options; the adapter only puts
// the middleware in front of next inside its framework's real engine. Each
// test sends the same requests over real HTTP connections to the adapter
// and to a reference, the core middleware on a bare net/http server, and
// requires the two answers to be identical on the wire (status, every header
// field but Date, body bytes), and the next handler to have run the same
// number of times. It also checks the answers against the contract: status
// codes, each header format, Retry-After, problem bodies, key and cost
// errors, store failures under each failure mode, shaping delays, a client
// that leaves while queued, custom deny and error handlers, the status that
// WithCountIf needs, the slot that WithMaxInFlight holds while the rest of
// the chain runs, WithSkip, and an exact count under concurrency.
//
// Time stands still (a [storetest.Clock]) unless a test moves it, so every
// decision is deterministic; only the shaping tests wait, a few
// milliseconds of real time.
package adaptertest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
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

// NewHandler returns the handler of a framework's engine in which the
// adapter under test limits requests with l, keyed by key, configured by
// opts, in front of next. next must be reachable for every method and path.
// It may register cleanups with t.
type NewHandler func(t *testing.T, l *ratelimit.Limiter, key ratelimit.KeyFunc, opts []ratelimit.Option, next http.Handler) http.Handler

// Run runs the conformance suite against the handlers made by newHandler.
func Run(t *testing.T, newHandler NewHandler) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, NewHandler)
	}{
		{"Allowed", testAllowed},
		{"Refused", testRefused},
		{"HeaderFormats", testHeaderFormats},
		{"RetryAfterRoundsUp", testRetryAfter},
		{"HEAD", testHead},
		{"KeyErrors", testKeyErrors},
		{"Cost", testCost},
		{"StoreFailOpen", testFailOpen},
		{"StoreFailClosed", testFailClosed},
		{"StoreFailLocal", testFailLocal},
		{"ShapingDelays", testShapingDelays},
		{"ShapingClientLeaves", testShapingClientLeaves},
		{"CustomDenyHandler", testCustomDeny},
		{"CustomErrorHandler", testCustomError},
		{"CountIf", testCountIf},
		{"MaxInFlight", testMaxInFlight},
		{"Skip", testSkip},
		{"ConcurrentExactCount", testConcurrent},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newHandler) })
	}
}

// Request header fields read by the suite's key function.
const keyHeader = "X-Client"

// Values of keyHeader that make the key function fail.
const (
	keyNoIP  = "no-ip" // ErrNoClientIP: 400
	keyError = "error" // any other error: 500
)

// key is the suite's key function: the X-Client field, ErrMissingKey
// without it.
func key(r *http.Request) (string, error) {
	switch v := r.Header.Get(keyHeader); v {
	case "":
		return "", ratelimit.ErrMissingKey
	case keyNoIP:
		return "", ratelimit.ErrNoClientIP
	case keyError:
		return "", errors.New("adaptertest: key function failed")
	default:
		return "client:" + v, nil
	}
}

// setup describes the limiter of a test.
type setup struct {
	policy ratelimit.Policy
	opts   []ratelimit.Option
	// store returns a fresh store reading the test's clock for side
	// (adapter or reference); nil means a memorystore.
	store func(t *testing.T, c *storetest.Clock, side int) ratelimit.Store
	// wrap, if not nil, wraps the handler of side before it is served.
	wrap func(side int, h http.Handler) http.Handler
}

// The sides of a fixture.
const (
	adapterSide = iota
	referenceSide
)

// side is one of the two servers of a fixture.
type side struct {
	srv   *httptest.Server
	calls atomic.Int64 // runs of the next handler
	// ran receives the time of every run of the next handler.
	ran chan time.Time
	// A request for /block signals entered, then waits for release.
	entered, release chan struct{}
}

// fixture is the adapter under test and the reference, each with a store
// of its own, both reading one clock.
type fixture struct {
	t       *testing.T
	clock   *storetest.Clock
	adapter *side
	ref     *side
}

func newFixture(t *testing.T, nh NewHandler, s setup) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: new(storetest.Clock)}
	f.adapter = f.newSide(t, s, adapterSide, func(l *ratelimit.Limiter, next http.Handler) http.Handler {
		h := nh(t, l, key, s.opts, next)
		require.NotNil(t, h, "NewHandler returned nil")
		return h
	})
	f.ref = f.newSide(t, s, referenceSide, func(l *ratelimit.Limiter, next http.Handler) http.Handler {
		m, err := ratelimit.NewMiddleware(l, key, s.opts...)
		require.NoError(t, err)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.Handle(w, r, func() int {
				sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
				next.ServeHTTP(sw, r)
				return sw.status
			})
		})
	})
	return f
}

func (f *fixture) newSide(t *testing.T, s setup, i int, build func(*ratelimit.Limiter, http.Handler) http.Handler) *side {
	t.Helper()
	var store ratelimit.Store
	if s.store != nil {
		store = s.store(t, f.clock, i)
	} else {
		store = newMemoryStore(t, f.clock)
	}
	l, err := ratelimit.New(store, s.policy)
	require.NoError(t, err)
	sd := &side{ran: make(chan time.Time, 100), entered: make(chan struct{}, 10), release: make(chan struct{}, 10)}
	h := build(l, next(sd))
	if s.wrap != nil {
		h = s.wrap(i, h)
	}
	sd.srv = httptest.NewServer(h)
	t.Cleanup(sd.srv.Close)
	return sd
}

// statusWriter records the status of the response written through it.
type statusWriter struct {
	http.ResponseWriter
	status  int
	written bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.written && code >= 200 {
		s.status, s.written = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.written = true
	return s.ResponseWriter.Write(b)
}

func newMemoryStore(t *testing.T, c *storetest.Clock) ratelimit.Store {
	t.Helper()
	s, err := memorystore.New(memorystore.WithClock(c.Now), memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// next is the final handler: it counts its runs and answers with a body
// and header fields of its own, which the adapter must leave alone. It
// answers /status/NNN with status NNN, and holds /block until released.
func next(sd *side) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sd.calls.Add(1)
		select {
		case sd.ran <- time.Now():
		default:
		}
		status := http.StatusOK
		if code, ok := strings.CutPrefix(r.URL.Path, "/status/"); ok {
			if n, err := strconv.Atoi(code); err == nil {
				status = n
			}
		}
		if r.URL.Path == "/block" {
			sd.entered <- struct{}{}
			<-sd.release
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Next", "ran")
		w.WriteHeader(status)
		io.WriteString(w, "next: "+r.Method+" "+r.URL.Path+"\n")
	})
}

// request is one request of a test.
type request struct {
	method string // GET if empty
	path   string // "/geocode" if empty
	client string // X-Client; none if empty
}

// response is an answer as the client sees it.
type response struct {
	Status int
	Header http.Header // without Date
	Body   string
}

func (s *side) do(t *testing.T, ctx context.Context, req request) response {
	t.Helper()
	method, path := req.method, req.path
	if method == "" {
		method = http.MethodGet
	}
	if path == "" {
		path = "/geocode"
	}
	r, err := http.NewRequestWithContext(ctx, method, s.srv.URL+path, nil)
	require.NoError(t, err)
	if req.client != "" {
		r.Header.Set(keyHeader, req.client)
	}
	resp, err := s.srv.Client().Do(r)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Header.Del("Date")
	return response{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}
}

// send sends req to the reference and to the adapter, requires identical
// answers and the same number of runs of the next handler, and returns the
// adapter's answer.
func (f *fixture) send(req request) response {
	f.t.Helper()
	want := f.ref.do(f.t, context.Background(), req)
	got := f.adapter.do(f.t, context.Background(), req)
	require.Equal(f.t, want, got, "%s %s with %s: %q: the adapter's answer differs from net/http's", req.method, req.path, keyHeader, req.client)
	require.Equal(f.t, f.ref.calls.Load(), f.adapter.calls.Load(), "runs of the next handler")
	return got
}

// sendN sends req n times and returns the statuses.
func (f *fixture) sendN(req request, n int) []int {
	f.t.Helper()
	codes := make([]int, n)
	for i := range codes {
		codes[i] = f.send(req).Status
	}
	return codes
}

func repeat(code, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = code
	}
	return s
}

// problem decodes a problem body.
func problem(t *testing.T, r response) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.Body), &v), "body %q", r.Body)
	return v
}

const (
	typeQuotaExceeded   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	typeReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// rateLimitFields are the names of every rate-limit header field of every
// format.
var rateLimitFields = []string{
	"RateLimit-Policy", "RateLimit",
	"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset",
	"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
}

// rateLimitHeader returns the rate-limit header fields of r.
func rateLimitHeader(r response) map[string]string {
	m := map[string]string{}
	for _, name := range rateLimitFields {
		if vs := r.Header.Values(name); len(vs) > 0 {
			m[name] = strings.Join(vs, "|")
		}
	}
	return m
}

func assertNextRan(t *testing.T, r response) {
	t.Helper()
	assert.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, "ran", r.Header.Get("X-Next"))
	assert.Equal(t, "text/plain; charset=utf-8", r.Header.Get("Content-Type"))
	assert.True(t, strings.HasPrefix(r.Body, "next: "), "body %q", r.Body)
	assert.Empty(t, r.Header.Get("Retry-After"))
}

// assertRefused checks a 429 answer with the default deny handler.
func assertRefused(t *testing.T, r response, policy, retryAfter string) {
	t.Helper()
	assert.Equal(t, http.StatusTooManyRequests, r.Status)
	assert.Equal(t, retryAfter, r.Header.Get("Retry-After"))
	assert.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	assert.Equal(t, "no-store", r.Header.Get("Cache-Control"))
	assert.Equal(t, []string{strconv.Itoa(len(r.Body))}, r.Header.Values("Content-Length"))
	assert.Empty(t, r.Header.Get("X-Next"), "the next handler must not run")
	p := problem(t, r)
	assert.Equal(t, typeQuotaExceeded, p["type"])
	assert.EqualValues(t, 429, p["status"])
	assert.Equal(t, []any{policy}, p["violated-policies"])
	assert.Equal(t, "Too many requests; retry after "+retryAfter+" s.", p["detail"])
}

// assertError checks an answer of the default error handler.
func assertError(t *testing.T, r response, status int, typ string) {
	t.Helper()
	assert.Equal(t, status, r.Status)
	assert.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	assert.Empty(t, r.Header.Get("X-Next"), "the next handler must not run")
	assert.Empty(t, rateLimitHeader(r), "no decision, no rate-limit fields")
	p := problem(t, r)
	assert.Equal(t, typ, p["type"])
	assert.EqualValues(t, status, p["status"])
	assert.NotContains(t, r.Body, "adaptertest", "the error's text must not leak")
}

func tokenBucket(name string, l ratelimit.Limit) ratelimit.Policy {
	return ratelimit.Policy{Name: name, Limit: l}
}

func testAllowed(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{policy: tokenBucket("per-key", ratelimit.PerSecond(5).WithBurst(10))})
	for i, want := range []string{`"per-key";r=9;t=1`, `"per-key";r=8;t=1`, `"per-key";r=7;t=1`} {
		r := f.send(request{client: "alice", path: "/geocode?q=paris"})
		assertNextRan(t, r)
		assert.Equal(t, map[string]string{"RateLimit-Policy": `"per-key";q=10;w=2`, "RateLimit": want}, rateLimitHeader(r), "request %d", i+1)
		assert.Equal(t, "next: GET /geocode\n", r.Body)
	}
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		r := f.send(request{method: method, path: "/other/path", client: "bob"})
		assertNextRan(t, r)
		assert.Equal(t, "next: "+method+" /other/path\n", r.Body)
	}
	assert.EqualValues(t, 6, f.adapter.calls.Load())
}

func testRefused(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{policy: tokenBucket("per-key", ratelimit.PerSecond(5).WithBurst(10))})
	alice := request{client: "alice"}
	require.Equal(t, repeat(200, 10), f.sendN(alice, 10))
	for range 2 {
		r := f.send(alice)
		assertRefused(t, r, "per-key", "1")
		assert.Equal(t, map[string]string{"RateLimit-Policy": `"per-key";q=10;w=2`, "RateLimit": `"per-key";r=0;t=1`}, rateLimitHeader(r))
	}
	assert.EqualValues(t, 10, f.adapter.calls.Load(), "refused requests never reach the next handler")

	// Another client has a bucket of its own.
	r := f.send(request{client: "bob"})
	assertNextRan(t, r)
	assert.Equal(t, `"per-key";r=9;t=1`, r.Header.Get("RateLimit"))

	// The worked example: one second later five tokens are back.
	f.clock.Advance(time.Second)
	assert.Equal(t, append(repeat(200, 5), 429), f.sendN(alice, 6))
}

func testHeaderFormats(t *testing.T, nh NewHandler) {
	for _, tc := range []struct {
		format         ratelimit.HeaderFormat
		first, refused map[string]string
	}{
		{
			format:  ratelimit.HeadersIETF,
			first:   map[string]string{"RateLimit-Policy": `"default";q=2;w=2`, "RateLimit": `"default";r=1;t=1`},
			refused: map[string]string{"RateLimit-Policy": `"default";q=2;w=2`, "RateLimit": `"default";r=0;t=1`},
		},
		{
			format:  ratelimit.HeadersLegacy,
			first:   map[string]string{"RateLimit-Limit": "2", "RateLimit-Remaining": "1", "RateLimit-Reset": "1"},
			refused: map[string]string{"RateLimit-Limit": "2", "RateLimit-Remaining": "0", "RateLimit-Reset": "2"},
		},
		{
			format:  ratelimit.HeadersX,
			first:   map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "1"},
			refused: map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "2"},
		},
		{format: ratelimit.HeadersNone, first: map[string]string{}, refused: map[string]string{}},
	} {
		t.Run(tc.format.String(), func(t *testing.T) {
			f := newFixture(t, nh, setup{
				policy: tokenBucket("", ratelimit.PerSecond(1).WithBurst(2)),
				opts:   []ratelimit.Option{ratelimit.WithHeaders(tc.format)},
			})
			req := request{client: "alice"}
			r := f.send(req)
			assertNextRan(t, r)
			assert.Equal(t, tc.first, rateLimitHeader(r), "first request")
			f.send(req)
			r = f.send(req)
			assertRefused(t, r, "default", "1")
			assert.Equal(t, tc.refused, rateLimitHeader(r), "refused request")
		})
	}
}

func testRetryAfter(t *testing.T, nh NewHandler) {
	// One token every 1.5 s: Retry-After is the wait rounded up to whole
	// seconds, and never 0.
	f := newFixture(t, nh, setup{policy: tokenBucket("slow", ratelimit.Every(1500*time.Millisecond))})
	req := request{client: "alice"}
	assertNextRan(t, f.send(req))
	assertRefused(t, f.send(req), "slow", "2")
	f.clock.Advance(600 * time.Millisecond) // 0.9 s to go
	assertRefused(t, f.send(req), "slow", "1")
	f.clock.Advance(900*time.Millisecond - 1) // 1 ns to go
	r := f.send(req)
	assertRefused(t, r, "slow", "1")
	assert.Equal(t, `"slow";r=0;t=1`, r.Header.Get("RateLimit"))
	f.clock.Advance(1)
	assertNextRan(t, f.send(req))
}

func testHead(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{policy: tokenBucket("", ratelimit.PerMinute(1))})
	req := request{method: http.MethodHead, client: "alice"}
	r := f.send(req)
	assert.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, "ran", r.Header.Get("X-Next"))
	r = f.send(req)
	assert.Equal(t, http.StatusTooManyRequests, r.Status)
	assert.Equal(t, "60", r.Header.Get("Retry-After"))
	assert.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	assert.NotEmpty(t, r.Header.Get("Content-Length"), "the length of the body a GET would get")
	assert.Empty(t, r.Body)
	assert.Empty(t, r.Header.Get("X-Next"))
	assert.EqualValues(t, 1, f.adapter.calls.Load())
}

func testKeyErrors(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{policy: tokenBucket("", ratelimit.PerSecond(5))})
	assertError(t, f.send(request{}), http.StatusUnauthorized, "about:blank")
	assertError(t, f.send(request{client: keyNoIP}), http.StatusBadRequest, "about:blank")
	assertError(t, f.send(request{client: keyError}), http.StatusInternalServerError, "about:blank")
	assertError(t, f.send(request{method: http.MethodPost, path: "/x"}), http.StatusUnauthorized, "about:blank")
	assert.Zero(t, f.adapter.calls.Load(), "the next handler must never run")
}

func testCost(t *testing.T, nh NewHandler) {
	cost := ratelimit.WithCost(func(r *http.Request) (int64, error) {
		s := r.URL.Query().Get("cost")
		if s == "" {
			return 1, nil
		}
		var n int64
		if err := json.Unmarshal([]byte(s), &n); err != nil {
			return 0, errors.New("adaptertest: bad cost")
		}
		return n, nil
	})
	f := newFixture(t, nh, setup{policy: tokenBucket("batch", ratelimit.PerSecond(1).WithBurst(5)), opts: []ratelimit.Option{cost}})
	r := f.send(request{client: "alice", path: "/geocode?cost=3"})
	assertNextRan(t, r)
	assert.Equal(t, `"batch";r=2;t=1`, r.Header.Get("RateLimit"))
	assertRefused(t, f.send(request{client: "alice", path: "/geocode?cost=3"}), "batch", "1")
	assertError(t, f.send(request{client: "alice", path: "/geocode?cost=x"}), http.StatusBadRequest, "about:blank")
	assertError(t, f.send(request{client: "alice", path: "/geocode?cost=-1"}), http.StatusBadRequest, "about:blank")
	assertError(t, f.send(request{client: "alice", path: "/geocode?cost=6"}), http.StatusBadRequest, "about:blank")
	assert.EqualValues(t, 1, f.adapter.calls.Load())
}

// errStoreDown is the error of failingStore.
var errStoreDown = errors.New("adaptertest: store down")

// failingStore is a store whose every call fails.
type failingStore struct{}

func (failingStore) Take(context.Context, ratelimit.Policy, string, int64) (ratelimit.Result, error) {
	return ratelimit.Result{}, errStoreDown
}

func failover(mode ratelimit.FailureMode) func(*testing.T, *storetest.Clock, int) ratelimit.Store {
	return func(t *testing.T, c *storetest.Clock, _ int) ratelimit.Store {
		s, err := ratelimit.NewFailover(failingStore{}, ratelimit.FailoverConfig{
			Mode:      mode,
			Local:     newMemoryStore(t, c),
			Instances: 2,
			Logger:    slog.New(slog.DiscardHandler),
			Clock:     c.Now,
		})
		require.NoError(t, err)
		return s
	}
}

func testFailOpen(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{policy: tokenBucket("", ratelimit.PerSecond(1)), store: failover(ratelimit.FailOpen)})
	for range 5 {
		r := f.send(request{client: "alice"})
		assertNextRan(t, r)
		assert.Empty(t, rateLimitHeader(r), "an unchecked request carries no rate-limit fields")
	}
	assert.EqualValues(t, 5, f.adapter.calls.Load())
}

func testFailClosed(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{policy: tokenBucket("", ratelimit.PerSecond(1)), store: failover(ratelimit.FailClosed)})
	for range 3 {
		r := f.send(request{client: "alice"})
		assertError(t, r, http.StatusServiceUnavailable, typeReducedCapacity)
		assert.Equal(t, "1", r.Header.Get("Retry-After"))
		assert.Equal(t, "Temporary Reduced Capacity", problem(t, r)["title"])
	}
	assert.Zero(t, f.adapter.calls.Load())
}

func testFailLocal(t *testing.T, nh NewHandler) {
	// Burst 4 shared by 2 instances: 2 each while the store is down.
	f := newFixture(t, nh, setup{policy: tokenBucket("", ratelimit.PerSecond(4)), store: failover(ratelimit.FailLocal)})
	req := request{client: "alice"}
	for range 2 {
		r := f.send(req)
		assertNextRan(t, r)
		assert.Empty(t, rateLimitHeader(r))
	}
	r := f.send(req)
	assertRefused(t, r, "default", "1")
	assert.Empty(t, rateLimitHeader(r), "a degraded decision carries no rate-limit fields")
	assert.EqualValues(t, 2, f.adapter.calls.Load())
}

func testShapingDelays(t *testing.T, nh NewHandler) {
	// A queue leaving at 1 request per millisecond with room for 5: with
	// time standing still, request i waits i ms, and the seventh is refused.
	f := newFixture(t, nh, setup{policy: ratelimit.Policy{Name: "queue", Limit: ratelimit.Per(1000, time.Second).WithBurst(5), Algorithm: ratelimit.LeakyShape}})
	for i := range 6 {
		var answers [2]response
		for j, sd := range []*side{f.ref, f.adapter} {
			start := time.Now()
			answers[j] = sd.do(t, context.Background(), request{client: "alice"})
			assertNextRan(t, answers[j])
			select {
			case ran := <-sd.ran:
				assert.GreaterOrEqual(t, ran.Sub(start), time.Duration(i)*time.Millisecond, "request %d ran before its turn", i)
			default:
				t.Fatalf("request %d: the next handler did not run", i)
			}
		}
		require.Equal(t, answers[0], answers[1], "request %d: the adapter's answer differs from net/http's", i)
	}
	r := f.send(request{client: "alice"})
	assertRefused(t, r, "queue", "1")
	assert.EqualValues(t, 6, f.adapter.calls.Load())
	assert.EqualValues(t, 6, f.ref.calls.Load())
}

// takeSignal is a store that reports every decision on taken.
type takeSignal struct {
	ratelimit.Store
	taken chan struct{}
}

func (s takeSignal) Take(ctx context.Context, p ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	res, err := s.Store.Take(ctx, p, key, cost)
	s.taken <- struct{}{}
	return res, err
}

// recorder records, on the server's side, the answer to a client that may
// have left.
type recorder struct {
	http.ResponseWriter
	mu     sync.Mutex
	status int
	body   strings.Builder
}

func (w *recorder) WriteHeader(code int) {
	w.mu.Lock()
	if w.status == 0 {
		w.status = code
	}
	w.mu.Unlock()
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	w.mu.Lock()
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body.Write(b)
	w.mu.Unlock()
	return w.ResponseWriter.Write(b)
}

func testShapingClientLeaves(t *testing.T, nh NewHandler) {
	// One request every 10 s: the second one of a client waits 10 s, and
	// its client gives up while it waits.
	var signals [2]chan struct{}
	var recs [2]chan *recorder
	for i := range signals {
		signals[i] = make(chan struct{}, 10)
		recs[i] = make(chan *recorder, 10)
	}
	f := newFixture(t, nh, setup{
		policy: ratelimit.Policy{Limit: ratelimit.Every(10 * time.Second).WithBurst(2), Algorithm: ratelimit.LeakyShape},
		store: func(t *testing.T, c *storetest.Clock, i int) ratelimit.Store {
			return takeSignal{Store: newMemoryStore(t, c), taken: signals[i]}
		},
		wrap: func(i int, h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rec := &recorder{ResponseWriter: w}
				h.ServeHTTP(rec, r)
				recs[i] <- rec
			})
		},
	})
	sides := [2]*side{adapterSide: f.adapter, referenceSide: f.ref}
	var answers [2]*recorder
	for i, sd := range sides {
		r := sd.do(t, context.Background(), request{client: "alice"})
		assertNextRan(t, r)
		<-signals[i]
		<-recs[i]

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, sd.srv.URL+"/geocode", nil)
			if err == nil {
				req.Header.Set(keyHeader, "alice")
				var resp *http.Response
				if resp, err = sd.srv.Client().Do(req); err == nil {
					resp.Body.Close()
				}
			}
			done <- err
		}()
		select {
		case <-signals[i]: // decided: queued for 10 s
		case <-time.After(5 * time.Second):
			t.Fatal("the queued request was never decided")
		}
		cancel()
		assert.ErrorIs(t, <-done, context.Canceled)
		select {
		case answers[i] = <-recs[i]:
		case <-time.After(5 * time.Second):
			t.Fatal("the server still holds the request 5 s after its client left")
		}
		assert.EqualValues(t, 1, sd.calls.Load(), "the next handler must never run for a request whose client left")
	}
	got, want := answers[adapterSide], answers[referenceSide]
	assert.Equal(t, http.StatusServiceUnavailable, got.status)
	assert.Equal(t, want.status, got.status)
	assert.Equal(t, want.body.String(), got.body.String())
	for _, name := range []string{"Retry-After", "Content-Type", "RateLimit", "RateLimit-Policy"} {
		assert.Equal(t, want.Header().Get(name), got.Header().Get(name), name)
	}
	assert.Equal(t, "1", got.Header().Get("Retry-After"))
}

func testCustomDeny(t *testing.T, nh NewHandler) {
	deny := ratelimit.WithDenyHandler(func(w http.ResponseWriter, _ *http.Request, res ratelimit.Result) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "slow down, "+res.Policy+"\n")
	})
	f := newFixture(t, nh, setup{policy: tokenBucket("", ratelimit.PerMinute(1)), opts: []ratelimit.Option{deny}})
	f.send(request{client: "alice"})
	r := f.send(request{client: "alice"})
	assert.Equal(t, http.StatusTooManyRequests, r.Status)
	assert.Equal(t, "slow down, default\n", r.Body)
	assert.Equal(t, "text/plain; charset=utf-8", r.Header.Get("Content-Type"))
	assert.Equal(t, "60", r.Header.Get("Retry-After"))
	assert.Equal(t, `"default";r=0;t=60`, r.Header.Get("RateLimit"))
	assert.EqualValues(t, 1, f.adapter.calls.Load())
}

func testCustomError(t *testing.T, nh NewHandler) {
	onError := ratelimit.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
		status := http.StatusInternalServerError
		if errors.Is(err, ratelimit.ErrMissingKey) {
			status = http.StatusForbidden
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, `{"error":"no entry"}`+"\n")
	})
	f := newFixture(t, nh, setup{policy: tokenBucket("", ratelimit.PerMinute(1)), opts: []ratelimit.Option{onError}})
	for _, tc := range []struct {
		req    request
		status int
	}{
		{request{}, http.StatusForbidden},
		{request{method: http.MethodHead}, http.StatusForbidden},
		{request{client: keyError}, http.StatusInternalServerError},
	} {
		r := f.send(tc.req)
		assert.Equal(t, tc.status, r.Status)
		assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
		if tc.req.method != http.MethodHead {
			assert.Equal(t, `{"error":"no entry"}`+"\n", r.Body)
		}
	}
	assert.Zero(t, f.adapter.calls.Load())
}

func testConcurrent(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{policy: tokenBucket("", ratelimit.PerSecond(5).WithBurst(10))})
	const n = 40
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := http.NewRequest(http.MethodGet, f.adapter.srv.URL+"/geocode", nil)
			if err != nil {
				return
			}
			r.Header.Set(keyHeader, "racer")
			resp, err := f.adapter.srv.Client().Do(r)
			if err != nil {
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	assert.Equal(t, map[int]int{200: 10, 429: n - 10}, count)
	assert.EqualValues(t, 10, f.adapter.calls.Load())
}

func testCountIf(t *testing.T, nh NewHandler) {
	// The login guard: two failures a minute, successes never count. The
	// adapter must hand the core the status of the response.
	f := newFixture(t, nh, setup{
		policy: tokenBucket("login", ratelimit.PerMinute(2)),
		opts:   []ratelimit.Option{ratelimit.WithCountIf(ratelimit.Failed)},
	})
	ok := request{client: "alice", path: "/status/200"}
	failed := request{client: "alice", path: "/status/401"}
	assert.Equal(t, repeat(200, 5), f.sendN(ok, 5), "successes never spend")
	assert.Equal(t, []int{401, 401}, f.sendN(failed, 2))
	r := f.send(ok)
	assertRefused(t, r, "login", "30")
	assert.EqualValues(t, 7, f.adapter.calls.Load())
	f.clock.Advance(30 * time.Second)
	assert.Equal(t, []int{200, 200, 401, 429}, []int{f.send(ok).Status, f.send(ok).Status, f.send(failed).Status, f.send(failed).Status})
}

func testMaxInFlight(t *testing.T, nh NewHandler) {
	// One request at a time per key: the adapter must run the rest of the
	// chain inside the core, which holds the slot while it runs.
	f := newFixture(t, nh, setup{
		policy: tokenBucket("", ratelimit.PerSecond(100)),
		opts:   []ratelimit.Option{ratelimit.WithMaxInFlight(1, 0)},
	})
	var answers [2][3]response
	for i, sd := range []*side{f.ref, f.adapter} {
		done := make(chan response, 1)
		go func() {
			// Only the test goroutine may call require: report by value.
			r, err := get(sd, "/block", "alice")
			if err != nil {
				r = response{Status: -1, Body: err.Error()}
			}
			done <- r
		}()
		select {
		case <-sd.entered:
		case <-time.After(5 * time.Second):
			t.Fatal("the blocking request never reached the next handler")
		}
		answers[i][0] = sd.do(t, context.Background(), request{client: "alice"})
		answers[i][1] = sd.do(t, context.Background(), request{client: "bob"})
		sd.release <- struct{}{}
		first := <-done
		assert.Equal(t, http.StatusOK, first.Status, "body %q", first.Body)
		answers[i][2] = sd.do(t, context.Background(), request{client: "alice"})
	}
	require.Equal(t, answers[0], answers[1], "the adapter's answers differ from net/http's")
	got := answers[1]
	assertRefused(t, got[0], ratelimit.InFlightPolicyName, "1")
	assertNextRan(t, got[1])
	assertNextRan(t, got[2])
	assert.EqualValues(t, 3, f.adapter.calls.Load())
}

// get sends a GET for path with X-Client: client to sd, from any goroutine.
func get(sd *side, path, client string) (response, error) {
	r, err := http.NewRequest(http.MethodGet, sd.srv.URL+path, nil)
	if err != nil {
		return response{}, err
	}
	r.Header.Set(keyHeader, client)
	resp, err := sd.srv.Client().Do(r)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	resp.Header.Del("Date")
	return response{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}, err
}

func testSkip(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{
		policy: tokenBucket("", ratelimit.PerMinute(1)),
		opts:   []ratelimit.Option{ratelimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" })},
	})
	assertNextRan(t, f.send(request{client: "alice"}))
	assertRefused(t, f.send(request{client: "alice"}), "default", "60")
	for _, client := range []string{"alice", "", keyError} {
		r := f.send(request{client: client, path: "/healthz"})
		assertNextRan(t, r)
		assert.Empty(t, rateLimitHeader(r), "a skipped request is not decided")
	}
	assert.EqualValues(t, 4, f.adapter.calls.Load())
}
