package ratelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
	"github.com/tokenfair/ratelimit/storetest"
)

// keyByHeader keys requests by the plain value of X-Client, for tests.
func keyByHeader(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }

// costByHeader reads the cost of a request from X-Cost (default 1).
func costByHeader(r *http.Request) (int64, error) {
	if v := r.Header.Get("X-Cost"); v != "" {
		return strconv.ParseInt(v, 10, 64)
	}
	return 1, nil
}

type server struct {
	t       *testing.T
	clock   *storetest.Clock
	handler http.Handler
	calls   int
}

func newServer(t *testing.T, l ratelimit.Limit, store ratelimit.Store, opts ...ratelimit.Option) *server {
	t.Helper()
	s := &server{t: t, clock: new(storetest.Clock)}
	if store == nil {
		ms, err := memorystore.New(memorystore.WithClock(s.clock.Now), memorystore.WithSweepInterval(0))
		require.NoError(t, err)
		store = ms
	}
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: l})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, append([]ratelimit.Option{ratelimit.WithCost(costByHeader)}, opts...)...)
	require.NoError(t, err)
	s.handler = nethttp.Middleware(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls++
		w.Write([]byte("ok"))
	}))
	return s
}

func (s *server) get(client string, header ...string) *httptest.ResponseRecorder {
	s.t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/geocode?q=paris", nil)
	if client != "" {
		r.Header.Set("X-Client", client)
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	s.handler.ServeHTTP(w, r)
	return w
}

func (s *server) codes(n int, client string) []int {
	s.t.Helper()
	var got []int
	for range n {
		got = append(got, s.get(client).Code)
	}
	return got
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
	s := newServer(t, ratelimit.PerSecond(5).WithBurst(10), nil)
	var got []int
	for i := range 12 {
		w := s.get("alice")
		got = append(got, w.Code)
		if i == 0 {
			assert.Equal(t, `"default";q=10;w=2`, w.Header().Get("RateLimit-Policy"))
			assert.Equal(t, `"default";r=9;t=1`, w.Header().Get("RateLimit"))
		}
		if w.Code == http.StatusTooManyRequests {
			assert.Equal(t, "1", w.Header().Get("Retry-After"))
		}
	}
	assert.Equal(t, append(repeat(200, 10), 429, 429), got)
	assert.Equal(t, 10, s.calls, "refused requests never reach the handler")
	assert.Equal(t, 200, s.get("bob").Code, "another client has its own bucket")

	s.clock.Advance(time.Second)
	assert.Equal(t, append(repeat(200, 5), 429), s.codes(6, "alice"), "one second later")
}

// TestExerciseOverHTTP: refill 2 per second, capacity 5, empty at T=0 (one
// request of cost 5 drains it); ten requests at T=3 s: five pass, five are
// refused.
func TestExerciseOverHTTP(t *testing.T) {
	s := newServer(t, ratelimit.PerSecond(2).WithBurst(5), nil)
	require.Equal(t, 200, s.get("c", "X-Cost", "5").Code)
	s.clock.Advance(3 * time.Second)
	assert.Equal(t, append(repeat(200, 5), repeat(429, 5)...), s.codes(10, "c"))
}

func TestDenyResponse(t *testing.T) {
	s := newServer(t, ratelimit.PerMinute(1), nil)
	require.Equal(t, 200, s.get("c").Code)
	w := s.get("c")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	h := w.Header()
	assert.Equal(t, "application/problem+json", h.Get("Content-Type"))
	assert.Equal(t, "no-store", h.Get("Cache-Control"))
	assert.Equal(t, "60", h.Get("Retry-After"))
	assert.Equal(t, `"default";r=0;t=60`, h.Get("RateLimit"))
	assert.Equal(t, strconv.Itoa(w.Body.Len()), h.Get("Content-Length"))
	var body map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body), "body %q", w.Body)
	assert.Equal(t, map[string]any{
		"type":              "https://iana.org/assignments/http-problem-types#quota-exceeded",
		"title":             "Quota Exceeded",
		"status":            429.0,
		"detail":            "Too many requests; retry after 60 s.",
		"violated-policies": []any{"default"},
	}, body)
}

func TestRetryAfterRoundsUp(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		want     string
	}{
		{200 * time.Millisecond, "1"},
		{time.Second, "1"},
		{1200 * time.Millisecond, "2"},
		{time.Second + time.Nanosecond, "2"},
		{time.Nanosecond, "1"},
	} {
		s := newServer(t, ratelimit.Every(tc.interval), nil)
		require.Equal(t, 200, s.get("c").Code)
		w := s.get("c")
		require.Equal(t, 429, w.Code)
		assert.Equal(t, tc.want, w.Header().Get("Retry-After"), "wait %v", tc.interval)
	}
}

func TestRetryJitter(t *testing.T) {
	s := newServer(t, ratelimit.Every(time.Second), nil, ratelimit.WithRetryJitter(10*time.Second))
	require.Equal(t, 200, s.get("c").Code)
	seen := map[string]bool{}
	for range 200 {
		w := s.get("c")
		require.Equal(t, 429, w.Code)
		ra, err := strconv.Atoi(w.Header().Get("Retry-After"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, ra, 1, "never earlier than the real wait")
		require.LessOrEqual(t, ra, 11)
		assert.Equal(t, `"default";r=0;t=`+strconv.Itoa(ra), w.Header().Get("RateLimit"), "t never earlier than Retry-After")
		seen[w.Header().Get("Retry-After")] = true
	}
	assert.Greater(t, len(seen), 5, "Retry-After values spread: %v", seen)
}

func TestHeaderFormats(t *testing.T) {
	want := map[ratelimit.HeaderFormat]map[string]string{
		ratelimit.HeadersIETF:   {"RateLimit-Policy": `"default";q=10;w=2`, "RateLimit": `"default";r=9;t=1`},
		ratelimit.HeadersLegacy: {"RateLimit-Limit": "10", "RateLimit-Remaining": "9", "RateLimit-Reset": "1"},
		ratelimit.HeadersX:      {"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "9", "X-RateLimit-Reset": "1"},
		ratelimit.HeadersNone:   {},
	}
	all := []string{"RateLimit-Policy", "RateLimit", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
	for f, fields := range want {
		s := newServer(t, ratelimit.PerSecond(5).WithBurst(10), nil, ratelimit.WithHeaders(f))
		h := s.get("c").Header()
		for _, name := range all {
			assert.Equal(t, fields[name], h.Get(name), "format %v, field %s", f, name)
		}
		s.get("c", "X-Cost", "9")
		w := s.get("c")
		require.Equal(t, 429, w.Code)
		assert.Equal(t, "1", w.Header().Get("Retry-After"), "format %v: Retry-After is always sent", f)
	}
}

type failingStore struct{ err error }

func (f failingStore) Take(context.Context, ratelimit.Policy, string, int64) (ratelimit.Result, error) {
	return ratelimit.Result{}, f.err
}

func TestErrorAnswers(t *testing.T) {
	secret := errors.New("dial tcp 10.1.2.3:6379: password=hunter2")
	for _, tc := range []struct {
		name    string
		store   ratelimit.Store
		key     ratelimit.KeyFunc
		header  []string
		status  int
		retry   string
		problem string
	}{
		{name: "missing key", key: func(*http.Request) (string, error) { return "", ratelimit.ErrMissingKey }, status: 401, problem: "Missing Credentials"},
		{name: "key error", key: func(*http.Request) (string, error) { return "", secret }, status: 500, problem: "Internal Server Error"},
		{name: "empty key", key: func(*http.Request) (string, error) { return "", nil }, status: 500, problem: "Internal Server Error"},
		{name: "bad client IP", key: func(*http.Request) (string, error) { return "", ratelimit.ErrNoClientIP }, status: 400, problem: "Bad Request"},
		{name: "cost error", header: []string{"X-Cost", "lots"}, status: 400, problem: "Bad Request"},
		{name: "negative cost", header: []string{"X-Cost", "-1"}, status: 400, problem: "Bad Request"},
		{name: "cost above burst", header: []string{"X-Cost", "11"}, status: 400, problem: "Request Cost Exceeds Capacity"},
		{name: "store down", store: failingStore{secret}, status: 503, retry: "1", problem: "Temporary Reduced Capacity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, ratelimit.PerSecond(5).WithBurst(10), tc.store)
			if tc.key != nil {
				lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(5)})
				require.NoError(t, err)
				m, err := ratelimit.NewMiddleware(lim, tc.key)
				require.NoError(t, err)
				s.handler = nethttp.Middleware(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { s.calls++ }))
			}
			w := s.get("c", tc.header...)
			assert.Equal(t, tc.status, w.Code)
			assert.Equal(t, 0, s.calls, "the handler is not called")
			assert.Equal(t, tc.retry, w.Header().Get("Retry-After"))
			assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
			var body struct{ Title string }
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
			assert.Equal(t, tc.problem, body.Title)
			assert.NotContains(t, w.Body.String(), "hunter2", "never the error's text")
			assert.Empty(t, w.Header().Get("RateLimit"), "no rate-limit fields without a decision")
		})
	}
}

func TestCustomHandlers(t *testing.T) {
	var gotErr error
	s := newServer(t, ratelimit.Every(time.Minute), nil,
		ratelimit.WithDenyHandler(func(w http.ResponseWriter, r *http.Request, res ratelimit.Result) {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("slow down, " + res.Policy))
		}),
		ratelimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			gotErr = err
			w.WriteHeader(http.StatusTeapot)
		}))
	require.Equal(t, 200, s.get("c").Code)
	w := s.get("c")
	assert.Equal(t, 503, w.Code)
	assert.Equal(t, "slow down, default", w.Body.String())
	assert.Equal(t, "60", w.Header().Get("Retry-After"), "set before the deny handler runs")
	assert.Equal(t, http.StatusTeapot, s.get("c", "X-Cost", "2").Code)
	assert.ErrorIs(t, gotErr, ratelimit.ErrCostExceedsBurst)
}

func memoryStore(t *testing.T) *memorystore.Store {
	s, err := memorystore.New(memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	return s
}

func TestConstructorErrors(t *testing.T) {
	store := memoryStore(t)
	good := ratelimit.Policy{Limit: ratelimit.PerSecond(1)}
	for name, p := range map[string]ratelimit.Policy{
		"invalid limit":   {Limit: ratelimit.Rate(0)},
		"bad name":        {Name: `a"b`, Limit: ratelimit.PerSecond(1)},
		"long name":       {Name: string(make([]byte, 65)), Limit: ratelimit.PerSecond(1)},
		"bad algorithm":   {Limit: ratelimit.PerSecond(1), Algorithm: 42},
		"burst overflows": {Limit: ratelimit.Every(time.Hour).WithBurst(1 << 50)},
	} {
		_, err := ratelimit.New(store, p)
		assert.Error(t, err, name)
	}
	_, err := ratelimit.New(nil, good)
	assert.Error(t, err, "nil store")
	lim, err := ratelimit.New(store, good)
	require.NoError(t, err)
	assert.Equal(t, "default", lim.Policies()[0].Name)

	for name, tc := range map[string]struct {
		l   *ratelimit.Limiter
		key ratelimit.KeyFunc
		opt ratelimit.Option
	}{
		"nil limiter":     {nil, keyByHeader, nil},
		"nil key":         {lim, nil, nil},
		"nil cost":        {lim, keyByHeader, ratelimit.WithCost(nil)},
		"nil deny":        {lim, keyByHeader, ratelimit.WithDenyHandler(nil)},
		"nil error":       {lim, keyByHeader, ratelimit.WithErrorHandler(nil)},
		"bad format":      {lim, keyByHeader, ratelimit.WithHeaders(99)},
		"negative jitter": {lim, keyByHeader, ratelimit.WithRetryJitter(-1)},
	} {
		var opts []ratelimit.Option
		if tc.opt != nil {
			opts = append(opts, tc.opt)
		}
		_, err := ratelimit.NewMiddleware(tc.l, tc.key, opts...)
		assert.Error(t, err, name)
	}
}

func TestLimiterTakeErrors(t *testing.T) {
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Name: "api", Limit: ratelimit.PerSecond(5)})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = lim.Take(ctx, "", 1)
	assert.ErrorIs(t, err, ratelimit.ErrEmptyKey)
	_, err = lim.Take(ctx, "k", -1)
	assert.ErrorIs(t, err, ratelimit.ErrNegativeCost)
	_, err = lim.Take(ctx, "k", 6)
	assert.ErrorIs(t, err, ratelimit.ErrCostExceedsBurst)
	assert.ErrorContains(t, err, `cost 6, policy "api" has burst 5`)
	res, err := lim.Take(ctx, "k", 5)
	require.NoError(t, err)
	assert.Equal(t, ratelimit.Result{Allowed: true, Policy: "api", Limit: ratelimit.PerSecond(5), ResetAfter: time.Second}, res)

	failing, err := ratelimit.New(failingStore{errors.New("boom")}, ratelimit.Policy{Limit: ratelimit.PerSecond(5)})
	require.NoError(t, err)
	_, err = failing.Take(ctx, "k", 1)
	assert.ErrorIs(t, err, ratelimit.ErrStore)
	assert.ErrorContains(t, err, "boom")
}
