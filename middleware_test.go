package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
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

// discardLogger is a logger that writes nothing.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

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
