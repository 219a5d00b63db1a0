package ratelimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/refusers"
	"github.com/tokenfair/ratelimit/internal/storeerr"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
)

// keyByHeader keys requests by the plain value of X-Client, for tests.
func keyByHeader(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }

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

// costByHeader reads the cost of a request from X-Cost (default 1).
func costByHeader(r *http.Request) (int64, error) {
	if v := r.Header.Get("X-Cost"); v != "" {
		return strconv.ParseInt(v, 10, 64)
	}
	return 1, nil
}

// fakeClock is a clock that moves only when told; safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

var fakeEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *fakeClock) Now() time.Time          { return fakeEpoch.Add(time.Duration(c.ns.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// memoryStore returns a memory store on the real clock (or, in a synctest
// bubble, the bubble's).
func memoryStore(t *testing.T) *memorystore.Store {
	t.Helper()
	s, err := memorystore.New(nil)
	require.NoError(t, err)
	return s
}

// clockStore returns a memory store that reads clock.
func clockStore(t *testing.T, clock *fakeClock) *memorystore.Store {
	t.Helper()
	s, err := memorystore.New(&memorystore.Options{Clock: clock.Now})
	require.NoError(t, err)
	return s
}

type server struct {
	t       *testing.T
	clock   *fakeClock
	handler http.Handler
	calls   int
}

// withCost returns opts, or the defaults, with costByHeader as the cost
// function unless opts has one.
func withCost(opts *ratelimit.MiddlewareOptions) *ratelimit.MiddlewareOptions {
	o := ratelimit.MiddlewareOptions{}
	if opts != nil {
		o = *opts
	}
	if o.Cost == nil {
		o.Cost = costByHeader
	}
	return &o
}

// newServer serves requests keyed by X-Client (cost from X-Cost) under one
// policy of limit l named "default", on store or, if nil, a memory store
// with a fake clock.
func newServer(t *testing.T, l ratelimit.Limit, store ratelimit.Store, opts *ratelimit.MiddlewareOptions) *server {
	t.Helper()
	s := &server{t: t, clock: new(fakeClock)}
	if store == nil {
		store = clockStore(t, s.clock)
	}
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: l})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, withCost(opts))
	require.NoError(t, err)
	s.handler = nethttp.Wrap(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	s := newServer(t, ratelimit.PerSecond(5).WithBurst(10), nil, nil)
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
	assert.Equal(t, 10, s.calls, "refused requests never reach the handler")
	assert.Equal(t, 200, s.get("bob").Code, "another client has its own bucket")

	s.clock.Advance(time.Second)
	assert.Equal(t, append(repeat(200, 5), 429), s.codes(6, "alice"), "one second later")
}

// TestExerciseOverHTTP: refill 2 per second, capacity 5, empty at T=0 (one
// request of cost 5 drains it); ten requests at T=3 s: five pass, five are
// refused.
func TestExerciseOverHTTP(t *testing.T) {
	s := newServer(t, ratelimit.PerSecond(2).WithBurst(5), nil, nil)
	require.Equal(t, 200, s.get("c", "X-Cost", "5").Code)
	s.clock.Advance(3 * time.Second)
	assert.Equal(t, append(repeat(200, 5), repeat(429, 5)...), s.codes(10, "c"))
}

func TestDenyResponse(t *testing.T) {
	s := newServer(t, ratelimit.Per(1, time.Minute), nil, nil)
	require.Equal(t, 200, s.get("c").Code)
	w := s.get("c")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	h := w.Header()
	assert.Equal(t, "application/problem+json", h.Get("Content-Type"))
	assert.Equal(t, "no-store", h.Get("Cache-Control"))
	assert.Equal(t, "60", h.Get("Retry-After"))
	assert.Equal(t, `"default";r=0;t=60`, field(h, "RateLimit"))
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
		s := newServer(t, ratelimit.Per(1, tc.interval), nil, nil)
		require.Equal(t, 200, s.get("c").Code)
		w := s.get("c")
		require.Equal(t, 429, w.Code)
		assert.Equal(t, tc.want, w.Header().Get("Retry-After"), "wait %v", tc.interval)
	}
}

func TestRetryJitter(t *testing.T) {
	s := newServer(t, ratelimit.Per(1, time.Second), nil, &ratelimit.MiddlewareOptions{RetryJitter: 10 * time.Second})
	require.Equal(t, 200, s.get("c").Code)
	seen := map[string]bool{}
	for range 200 {
		w := s.get("c")
		require.Equal(t, 429, w.Code)
		ra, err := strconv.Atoi(w.Header().Get("Retry-After"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, ra, 1, "never earlier than the real wait")
		require.LessOrEqual(t, ra, 11)
		assert.Equal(t, `"default";r=0;t=`+strconv.Itoa(ra), field(w.Header(), "RateLimit"), "t never earlier than Retry-After")
		seen[w.Header().Get("Retry-After")] = true
	}
	assert.Greater(t, len(seen), 5, "Retry-After values spread: %v", seen)
}

// RetryJitter never makes Retry-After earlier than the real wait, however
// long the wait: a 50-year ban with the longest jitter, and a wait a
// nanosecond short of the longest Duration, where the sum saturates.
func TestRetryJitterNeverShortens(t *testing.T) {
	const fiftyYears = 50 * 365 * 24 * time.Hour
	for _, wait := range []time.Duration{fiftyYears, math.MaxInt64 - 1, math.MaxInt64} {
		refuse := storeFunc(func(context.Context, *ratelimit.Policy, string, int64) (ratelimit.Result, error) {
			return ratelimit.Result{RetryAfter: wait, ResetAfter: wait}, nil
		})
		s := newServer(t, ratelimit.PerSecond(1), refuse, &ratelimit.MiddlewareOptions{RetryJitter: time.Hour})
		least := int64(wait / time.Second)
		if wait%time.Second != 0 {
			least++
		}
		for range 50 {
			w := s.get("c")
			require.Equal(t, 429, w.Code)
			ra, err := strconv.ParseInt(w.Header().Get("Retry-After"), 10, 64)
			require.NoError(t, err)
			require.GreaterOrEqual(t, ra, least, "Retry-After for a wait of %v", wait)
			require.LessOrEqual(t, ra, least+3600, "Retry-After for a wait of %v", wait)
		}
	}
}

// RetryJitter is at most an hour: more is an error naming the value, and
// the longest Duration is one (it overflowed the wait it was added to).
func TestRetryJitterBound(t *testing.T) {
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	require.NoError(t, err)
	_, err = ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{RetryJitter: time.Hour})
	assert.NoError(t, err, "an hour is allowed")
	for _, j := range []time.Duration{time.Hour + time.Nanosecond, 50 * 365 * 24 * time.Hour, math.MaxInt64} {
		_, err = ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{RetryJitter: j})
		assert.EqualError(t, err, "ratelimit: MiddlewareOptions.RetryJitter "+j.String()+": want a duration from 0 to 1h0m0s")
	}
}

// A middleware after this one that writes into a field's value in place
// (h["RateLimit"][0] = …) changes that response only: a second client
// making the same requests gets the same fields as the first one.
func TestHeaderValuesOwnedByResponse(t *testing.T) {
	for _, opts := range []ratelimit.MiddlewareOptions{
		{Headers: ratelimit.HeadersIETF}, {Headers: ratelimit.HeadersLegacy}, {Headers: ratelimit.HeadersX},
		{Headers: ratelimit.HeadersIETF, MaxInFlight: 5}, // RateLimit-Policy lists "inflight" too
	} {
		f := opts.Headers
		s := newServer(t, ratelimit.PerSecond(1).WithBurst(2), nil, &opts)
		var first []http.Header
		for _, client := range []string{"a", "b"} {
			for i := range 3 { // two allowed, one refused
				h := s.get(client).Header()
				if client == "a" {
					first = append(first, h.Clone())
				} else {
					assert.Equal(t, first[i], h, "format %v, MaxInFlight %d: request %d of client b", f, opts.MaxInFlight, i+1)
				}
				for _, v := range h {
					v[0] = "edited"
				}
			}
		}
	}
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
		s := newServer(t, ratelimit.PerSecond(5).WithBurst(10), nil, &ratelimit.MiddlewareOptions{Headers: f})
		h := s.get("c").Header()
		for _, name := range all {
			assert.Equal(t, fields[name], field(h, name), "format %v, field %s", f, name)
		}
		var names, wantNames []string // exactly these keys, spelled as the drafts do
		for name := range h {
			if strings.Contains(strings.ToLower(name), "ratelimit") {
				names = append(names, name)
			}
		}
		for name := range fields {
			wantNames = append(wantNames, name)
		}
		assert.ElementsMatch(t, wantNames, names, "format %v: rate-limit keys", f)
		s.get("c", "X-Cost", "9")
		w := s.get("c")
		require.Equal(t, 429, w.Code)
		assert.Equal(t, "1", w.Header().Get("Retry-After"), "format %v: Retry-After is always sent", f)
	}
}

var errDown = errors.New("connection refused")

type failingStore struct{ err error }

func (f failingStore) Take(context.Context, *ratelimit.Policy, string, int64) (ratelimit.Result, error) {
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
		{name: "empty key", key: func(*http.Request) (string, error) { return "", nil }, status: 401, problem: "Missing Credentials"},
		{name: "bad client IP", key: func(*http.Request) (string, error) { return "", ratelimit.ErrBadRequest }, status: 400, problem: "Bad Request"},
		{name: "panicking key", key: func(*http.Request) (string, error) { panic("hunter2") }, status: 500, problem: "Internal Server Error"},
		{name: "cost error", header: []string{"X-Cost", "lots"}, status: 400, problem: "Bad Request"},
		{name: "negative cost", header: []string{"X-Cost", "-1"}, status: 400, problem: "Bad Request"},
		{name: "cost above burst", header: []string{"X-Cost", "11"}, status: 400, problem: "Request Cost Exceeds Capacity"},
		{name: "store down", store: failingStore{secret}, status: 503, retry: "1", problem: "Temporary Reduced Capacity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, ratelimit.PerSecond(5).WithBurst(10), tc.store, nil)
			if tc.key != nil {
				lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(5)})
				require.NoError(t, err)
				m, err := ratelimit.NewMiddleware(lim, tc.key, nil)
				require.NoError(t, err)
				s.handler = nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { s.calls++ }))
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
			assert.Empty(t, field(w.Header(), "RateLimit"), "no rate-limit fields without a decision")
		})
	}
}

func TestCustomHandlers(t *testing.T) {
	var gotErr error
	s := newServer(t, ratelimit.Per(1, time.Minute), nil, &ratelimit.MiddlewareOptions{
		OnDeny: func(w http.ResponseWriter, r *http.Request, res ratelimit.Result) {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("slow down, " + res.Policy.Name + " " + res.Policy.Limit.String()))
		},
		OnError: func(w http.ResponseWriter, r *http.Request, err error) {
			gotErr = err
			w.WriteHeader(http.StatusTeapot)
		},
	})
	require.Equal(t, 200, s.get("c").Code)
	w := s.get("c")
	assert.Equal(t, 503, w.Code)
	assert.Equal(t, "slow down, default 1/min", w.Body.String())
	assert.Equal(t, "60", w.Header().Get("Retry-After"), "set before the deny handler runs")
	assert.Equal(t, http.StatusTeapot, s.get("c", "X-Cost", "2").Code)
	assert.ErrorIs(t, gotErr, ratelimit.ErrBadRequest)
	assert.ErrorContains(t, gotErr, `cost 2, policy "default" has burst 1`)
}

func TestConstructorErrors(t *testing.T) {
	store := memoryStore(t)
	good := ratelimit.Policy{Limit: ratelimit.PerSecond(1)}
	for name, p := range map[string]ratelimit.Policy{
		"invalid limit":   {Limit: ratelimit.PerSecond(0)},
		"zero limit":      {},
		"bad name":        {Name: `a"b`, Limit: ratelimit.PerSecond(1)},
		"long name":       {Name: string(make([]byte, 65)), Limit: ratelimit.PerSecond(1)},
		"bad algorithm":   {Limit: ratelimit.PerSecond(1), Algorithm: 42},
		"burst overflows": {Limit: ratelimit.Per(1, time.Hour).WithBurst(1 << 50)},
	} {
		_, err := ratelimit.New(store, p)
		assert.Error(t, err, name)
	}
	_, err := ratelimit.New(nil, good)
	assert.ErrorContains(t, err, "nil store")
	lim, err := ratelimit.New(store, good)
	require.NoError(t, err)
	assert.Equal(t, "default", lim.Policies()[0].Name)

	_, err = ratelimit.NewMiddleware(nil, keyByHeader, nil)
	assert.ErrorContains(t, err, "nil limiter")
	_, err = ratelimit.NewMiddleware(lim, nil, nil)
	assert.ErrorContains(t, err, "nil key function")
}

// Every field of Options is optional: nil, the zero Options and nil hooks
// are the defaults.
func TestOptionsDefaults(t *testing.T) {
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.Per(1, time.Minute)})
	require.NoError(t, err)
	for name, opts := range map[string]*ratelimit.MiddlewareOptions{
		"nil":       nil,
		"zero":      {},
		"nil hooks": {Cost: nil, OnDeny: nil, OnError: nil, LimiterFor: nil, Skip: nil, CountIf: nil, Observe: nil, Logger: nil},
	} {
		m, err := ratelimit.NewMiddleware(lim, keyByHeader, opts)
		require.NoError(t, err, name)
		assert.False(t, m.CountsResponses(), name)
		s := &server{t: t, handler: nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))}
		w := s.get(name)
		assert.Equal(t, 200, w.Code, name)
		assert.Equal(t, `"default";q=1;w=60`, field(w.Header(), "RateLimit-Policy"), "%s: IETF header fields", name)
		w = s.get(name)
		assert.Equal(t, 429, w.Code, name)
		assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"), "%s: the default deny answer", name)
	}
}

// An invalid option is an error of NewMiddleware that names the field and
// the value at fault.
func TestOptionsErrors(t *testing.T) {
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	require.NoError(t, err)
	for _, tc := range []struct {
		opts ratelimit.MiddlewareOptions
		want string
	}{
		{ratelimit.MiddlewareOptions{Headers: 99}, "MiddlewareOptions.Headers: unknown format 99"},
		{ratelimit.MiddlewareOptions{RetryJitter: -time.Second}, "MiddlewareOptions.RetryJitter -1s"},
		{ratelimit.MiddlewareOptions{MaxInFlight: -1, MaxInFlightTotal: 2}, "MiddlewareOptions.MaxInFlight -1"},
		{ratelimit.MiddlewareOptions{MaxInFlight: 1, MaxInFlightTotal: -3}, "MaxInFlightTotal -3"},
		{ratelimit.MiddlewareOptions{MaxInFlight: 1, Slots: failingSlots{}}, "MiddlewareOptions.SlotLease 0s"},
		{ratelimit.MiddlewareOptions{MaxInFlight: 1, Slots: failingSlots{}, SlotLease: -time.Second}, "MiddlewareOptions.SlotLease -1s"},
		{ratelimit.MiddlewareOptions{Slots: failingSlots{}, SlotLease: time.Second}, "MiddlewareOptions.Slots without MaxInFlight"},
		{ratelimit.MiddlewareOptions{MaxInFlight: 1, Slots: failingSlots{}, SlotLease: time.Second}, `MiddlewareOptions.SlotName "": want 1 to 64 characters`},
		{ratelimit.MiddlewareOptions{MaxInFlight: 1, Slots: failingSlots{}, SlotLease: time.Second, SlotName: "up:load"}, `MiddlewareOptions.SlotName "up:load"`},
		{ratelimit.MiddlewareOptions{MaxInFlight: 1, SlotName: "uploads"}, `MiddlewareOptions.SlotName "uploads" without Slots`},
	} {
		_, err := ratelimit.NewMiddleware(lim, keyByHeader, &tc.opts)
		assert.ErrorContains(t, err, tc.want, "NewMiddleware(%+v)", tc.opts)
	}
}

func TestLimiterTakeErrors(t *testing.T) {
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Name: "api", Limit: ratelimit.PerSecond(5)})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = lim.Take(ctx, "", 1)
	assert.ErrorIs(t, err, ratelimit.ErrMissingKey)
	assert.ErrorContains(t, err, "empty key")
	_, err = lim.Take(ctx, "k", -1)
	assert.ErrorIs(t, err, ratelimit.ErrBadRequest)
	assert.ErrorContains(t, err, "negative cost -1")
	_, err = lim.Take(ctx, "k", 6)
	assert.ErrorIs(t, err, ratelimit.ErrBadRequest)
	assert.ErrorContains(t, err, `cost 6, policy "api" has burst 5`)
	res, err := lim.Take(ctx, "k", 5)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, int64(0), res.Remaining)
	assert.Equal(t, time.Second, res.ResetAfter)
	assert.Zero(t, res.RetryAfter)
	assert.Nil(t, refusers.Names(res, false))
	assert.NotZero(t, res.Until, "the store's time until which the take can be given back")
	assert.Same(t, &lim.Policies()[0], res.Policy, "the deciding policy is the limiter's own")
	assert.Equal(t, ratelimit.PerSecond(5), res.Policy.Limit)

	failing, err := ratelimit.New(failingStore{errors.New("boom")}, ratelimit.Policy{Limit: ratelimit.PerSecond(5)})
	require.NoError(t, err)
	_, err = failing.Take(ctx, "k", 1)
	assert.ErrorIs(t, err, ratelimit.ErrStore)
	assert.ErrorContains(t, err, "boom")
}

// notAtomicStore is a BatchStore that can never decide a batch atomically,
// like Redis Cluster with keys on different slots.
type notAtomicStore struct {
	ratelimit.Store
	batches atomic.Int64
}

func (s *notAtomicStore) Refund(ctx context.Context, p *ratelimit.Policy, key string, cost int64, took ratelimit.Result) error {
	return s.Store.(ratelimit.RefundStore).Refund(ctx, p, key, cost, took)
}

func (s *notAtomicStore) TakeAll(context.Context, []ratelimit.BatchItem, []ratelimit.Result) error {
	s.batches.Add(1)
	return ratelimit.ErrNotAtomic
}

var sentinels = map[string]error{
	"ErrMissingKey":    ratelimit.ErrMissingKey,
	"ErrBadRequest":    ratelimit.ErrBadRequest,
	"ErrStore":         ratelimit.ErrStore,
	"ErrKeyState":      storeerr.ErrKeyState,
	"ErrNotAtomic":     ratelimit.ErrNotAtomic,
	"ErrWaitAbandoned": ratelimit.ErrWaitAbandoned,
	"ErrPanic":         ratelimit.ErrPanic,
}

// Each error wraps exactly one of the sentinel errors (ErrKeyState also
// ErrStore, which it is), and DefaultErrorHandler answers it with its status.
func TestSentinelErrors(t *testing.T) {
	limit := ratelimit.Per(5, time.Minute) // slow: the queued request waits 12 s, however loaded the machine
	oneKey := func(*http.Request) (string, error) { return "k", nil }
	for _, tc := range []struct {
		name   string
		store  ratelimit.Store
		algo   ratelimit.Algorithm
		key    ratelimit.KeyFunc
		opts   ratelimit.MiddlewareOptions
		cancel bool // the request's context has ended
		want   string
		status int
	}{
		{name: "no identity", key: func(*http.Request) (string, error) { return "", ratelimit.ErrMissingKey }, want: "ErrMissingKey", status: 401},
		{name: "empty key", key: func(*http.Request) (string, error) { return "", nil }, want: "ErrMissingKey", status: 401},
		{name: "no client IP", key: func(*http.Request) (string, error) { return "", fmt.Errorf("%w: no address", ratelimit.ErrBadRequest) }, want: "ErrBadRequest", status: 400},
		{name: "negative cost", opts: ratelimit.MiddlewareOptions{Cost: func(*http.Request) (int64, error) { return -1, nil }}, want: "ErrBadRequest", status: 400},
		{name: "cost above burst", opts: ratelimit.MiddlewareOptions{Cost: func(*http.Request) (int64, error) { return 6, nil }}, want: "ErrBadRequest", status: 400},
		{name: "cost function fails", opts: ratelimit.MiddlewareOptions{Cost: func(*http.Request) (int64, error) { return 0, errors.New("bad batch") }}, want: "ErrBadRequest", status: 400},
		{name: "store fails", store: failingStore{errDown}, want: "ErrStore", status: 503},
		{name: "a key's state is unusable", store: failingStore{fmt.Errorf("%w: WRONGTYPE", storeerr.ErrKeyState)}, want: "ErrKeyState", status: 503},
		{name: "slot store fails", opts: ratelimit.MiddlewareOptions{MaxInFlight: 1, Slots: failingSlots{}, SlotLease: time.Second, SlotName: "api"}, want: "ErrStore", status: 503},
		{name: "client left the queue", algo: ratelimit.LeakyShape, cancel: true, want: "ErrWaitAbandoned", status: 503},
		{name: "key function panics", key: func(*http.Request) (string, error) { panic("boom") }, want: "ErrPanic", status: 500},
		{name: "cost function panics", opts: ratelimit.MiddlewareOptions{Cost: func(*http.Request) (int64, error) { panic("boom") }}, want: "ErrPanic", status: 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, key := tc.store, tc.key
			if store == nil {
				store = memoryStore(t)
			}
			if key == nil {
				key = oneKey
			}
			lim, err := ratelimit.New(store, ratelimit.Policy{Limit: limit, Algorithm: tc.algo})
			require.NoError(t, err)
			var got error
			opts := tc.opts
			opts.OnError = func(w http.ResponseWriter, r *http.Request, err error) {
				got = err
				ratelimit.DefaultErrorHandler(w, r, err)
			}
			m, err := ratelimit.NewMiddleware(lim, key, &opts)
			require.NoError(t, err)
			h := nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			if tc.cancel { // one request empties the queue; the next must wait
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
			}
			r := httptest.NewRequest("GET", "/", nil)
			if tc.cancel {
				ctx, cancel := context.WithCancel(r.Context())
				cancel()
				r = r.WithContext(ctx)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			assert.Equal(t, tc.status, w.Code)
			require.Error(t, got)
			for name, sentinel := range sentinels {
				want := name == tc.want || name == "ErrStore" && tc.want == "ErrKeyState"
				assert.Equal(t, want, errors.Is(got, sentinel), "errors.Is(%q, %s)", got, name)
			}
		})
	}
}

// A BatchStore that cannot decide a batch atomically says ErrNotAtomic, and
// the Limiter decides the policies one at a time instead: the caller never
// sees that error.
func TestNotAtomicFallsBack(t *testing.T) {
	store := &notAtomicStore{Store: memoryStore(t)}
	lim, err := ratelimit.New(store,
		ratelimit.Policy{Name: "burst", Limit: ratelimit.Per(3, time.Minute)},
		ratelimit.Policy{Name: "sustained", Limit: ratelimit.Per(5, time.Hour)})
	require.NoError(t, err)
	var allowed []bool
	for range 4 {
		res, err := lim.Take(context.Background(), "k", 1)
		require.NoError(t, err)
		allowed = append(allowed, res.Allowed)
	}
	assert.Equal(t, []bool{true, true, true, false}, allowed)
	assert.Equal(t, int64(4), store.batches.Load(), "each decision tried the batch first")
	res, err := lim.Take(context.Background(), "k", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(2), res.Results[1].Remaining, "the refusal gave back what it took from the other policy")
}

// ctxUser is the context key of the user IDs in these tests.
type ctxUser struct{}

// lineLogger returns a logger at level into buf, for counting lines.
func lineLogger(buf *bytes.Buffer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level}))
}

// Every answer that is not a 429 explains itself in its problem detail,
// without the request's header values, key or secrets, in the body or in
// the first line logged; the first line logs the same detail.
func TestProblemDetails(t *testing.T) {
	const secret = "sk_live_0123456789abcdef"
	ip, err := ratelimit.KeyByIP(&ratelimit.IPOptions{TrustedProxies: []string{"192.0.2.0/24"}})
	require.NoError(t, err)
	storeErr := errors.New("dial tcp 10.1.2.3:6379: password=" + secret)
	for _, tc := range []struct {
		name      string
		key       ratelimit.KeyFunc
		store     ratelimit.Store
		prepare   func(r *http.Request) *http.Request
		status    int
		title     string
		detail    string
		challenge string
		// debugQuotes: the debug lines quote the value at fault (a
		// forwarding entry, a cost function's error), which is no secret.
		debugQuotes bool
	}{
		{name: "no API key", key: ratelimit.KeyByAPIKey("X-API-Key"),
			status: 401, title: "Missing Credentials", detail: "the request carries no X-API-Key header", challenge: `ApiKey in="header", name="X-API-Key"`},
		{name: "empty API key", key: ratelimit.KeyByAPIKey("X-API-Key"), prepare: header("X-API-Key", " "),
			status: 401, title: "Missing Credentials", detail: "the request's X-API-Key header is empty", challenge: `ApiKey in="header", name="X-API-Key"`},
		{name: "no user", key: ratelimit.KeyByContextValue(ctxUser{}), prepare: header("Authorization", "Bearer "+secret),
			status: 401, title: "Missing Credentials", detail: "the request carries no user ID in its context", challenge: "Bearer"},
		{name: "user of a wrong type", key: ratelimit.KeyByContextValue(ctxUser{}), prepare: userValue(map[string]int{secret: 1}),
			status: 500, title: "Internal Server Error", detail: "the rate limit could not be checked"}, // see TestKeyByContextValueUnusableTypeIs500
		{name: "empty key", key: func(*http.Request) (string, error) { return "", nil }, prepare: header("X-API-Key", secret),
			status: 401, title: "Missing Credentials", detail: "the key function returned an empty key", challenge: "Bearer"},
		{name: "bare ErrMissingKey", key: func(*http.Request) (string, error) { return "", ratelimit.ErrMissingKey },
			status: 401, title: "Missing Credentials", detail: "the request carries no credentials by which to limit it", challenge: "Bearer"},
		{name: "bad X-Forwarded-For entry", key: ip, prepare: header("X-Forwarded-For", secret), debugQuotes: true,
			status: 400, title: "Bad Request", detail: "the trusted proxy sent an X-Forwarded-For entry that is not an IP address"},
		{name: "bare ErrBadRequest", key: func(*http.Request) (string, error) { return "", ratelimit.ErrBadRequest },
			status: 400, title: "Bad Request", detail: "the request cannot be rate-limited as it is"},
		{name: "cost function failed", prepare: header("X-Cost", secret), debugQuotes: true,
			status: 400, title: "Bad Request", detail: "the cost function failed"},
		{name: "negative cost", prepare: header("X-Cost", "-3"),
			status: 400, title: "Bad Request", detail: "the request's cost, -3, is negative"},
		{name: "cost above burst", prepare: header("X-Cost", "12"),
			status: 400, title: "Request Cost Exceeds Capacity", detail: `the request's cost, 12, is above the burst of policy "api", 10`},
		{name: "store down", store: failingStore{storeErr},
			status: 503, title: "Temporary Reduced Capacity", detail: "the rate limit cannot be checked for now; retry after 1 s"},
		{name: "key function error", key: func(*http.Request) (string, error) { return "", storeErr },
			status: 500, title: "Internal Server Error", detail: "the rate limit could not be checked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.key == nil {
				tc.key = keyByHeader
			}
			if tc.store == nil {
				tc.store = memoryStore(t)
			}
			lim, err := ratelimit.New(tc.store, ratelimit.Policy{Name: "api", Limit: ratelimit.PerSecond(5).WithBurst(10)})
			require.NoError(t, err)
			var logs bytes.Buffer
			m, err := ratelimit.NewMiddleware(lim, tc.key, &ratelimit.MiddlewareOptions{Cost: costByHeader, Logger: lineLogger(&logs, slog.LevelDebug)})
			require.NoError(t, err)
			h := nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("the handler runs") }))
			for i := range 2 {
				r := httptest.NewRequest(http.MethodGet, "/geocode?q=paris", nil)
				r.RemoteAddr = "192.0.2.1:1234"
				r.Header.Set("X-Client", "c")
				if tc.prepare != nil {
					r = tc.prepare(r)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				assert.Equal(t, tc.status, w.Code)
				assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
				var body struct{ Title, Detail string }
				require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body), w.Body.String())
				assert.Equal(t, tc.title, body.Title)
				assert.Equal(t, tc.detail, body.Detail)
				assert.Equal(t, tc.challenge, w.Header().Get("WWW-Authenticate"))
				assert.NotContains(t, w.Body.String(), secret, "request %d: the body", i)
				assert.NotContains(t, fmt.Sprint(w.Header()), secret, "request %d: the header fields", i)
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if tc.status < 500 {
				require.Len(t, lines, 2, logs.String())
				assert.Contains(t, lines[0], "level=WARN", "the first refusal")
				assert.Contains(t, lines[0], fmt.Sprintf("detail=%q", tc.detail))
				assert.Contains(t, lines[0], "method=GET path=/geocode")
				assert.NotContains(t, lines[0], secret, "the first line logs the detail, not the value")
				assert.Contains(t, lines[1], "level=DEBUG", "the second")
			}
			if !tc.debugQuotes && tc.status != 503 && tc.status != 500 {
				assert.NotContains(t, logs.String(), secret, "no line quotes the secret")
			}
		})
	}
}

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

// The cost-above-burst body on the wire, with its escaped quotes; and a
// detail with HTML characters is escaped as encoding/json escapes it.
func TestProblemBodyBytes(t *testing.T) {
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Name: "api", Limit: ratelimit.PerSecond(5).WithBurst(10)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, ratelimit.KeyByContextValue(ctxUser{}), &ratelimit.MiddlewareOptions{Cost: costByHeader, Logger: discardLogger()})
	require.NoError(t, err)
	h := nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	r := userValue("alice")(httptest.NewRequest(http.MethodGet, "/", nil))
	r.Header.Set("X-Cost", "12")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	assert.Equal(t, `{"type":"about:blank","title":"Request Cost Exceeds Capacity","status":400,"detail":"the request's cost, 12, is above the burst of policy \"api\", 10"}`+"\n", w.Body.String())
	assert.Equal(t, strconv.Itoa(w.Body.Len()), w.Header().Get("Content-Length"))

	// A header name may hold '&', which encoding/json escapes.
	m, err = ratelimit.NewMiddleware(lim, ratelimit.KeyByAPIKey("X-Key-&-Secret"), &ratelimit.MiddlewareOptions{Logger: discardLogger()})
	require.NoError(t, err)
	h = nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	detail := "the request carries no X-Key-&-Secret header"
	want, err := json.Marshal(detail)
	require.NoError(t, err)
	assert.Contains(t, w.Body.String(), `"detail":`+string(want)+"}\n", "escaped as encoding/json does")
	assert.Contains(t, w.Body.String(), `X-Key-\u0026-Secret`)
}

// A 401 carries the WWW-Authenticate challenge that RFC 9110 requires:
// the key function's by default, MiddlewareOptions.Challenge when set; other
// answers carry none.
func TestWWWAuthenticate(t *testing.T) {
	get := func(key ratelimit.KeyFunc, opts *ratelimit.MiddlewareOptions, prepare ...func(*http.Request) *http.Request) *httptest.ResponseRecorder {
		t.Helper()
		lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(5)})
		require.NoError(t, err)
		if opts == nil {
			opts = new(ratelimit.MiddlewareOptions)
		}
		opts.Logger = discardLogger()
		m, err := ratelimit.NewMiddleware(lim, key, opts)
		require.NoError(t, err)
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		for _, p := range prepare {
			r = p(r)
		}
		w := httptest.NewRecorder()
		nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, r)
		return w
	}
	w := get(ratelimit.KeyByAPIKey("X-API-Key"), nil)
	assert.Equal(t, 401, w.Code)
	assert.Equal(t, []string{`ApiKey in="header", name="X-API-Key"`}, w.Header()["Www-Authenticate"])
	assert.Equal(t, "Bearer", get(ratelimit.KeyByAPIKey("Authorization"), nil).Header().Get("WWW-Authenticate"))
	assert.Equal(t, "Bearer", get(ratelimit.KeyByContextValue(ctxUser{}), nil).Header().Get("WWW-Authenticate"))

	configured := &ratelimit.MiddlewareOptions{Challenge: `Bearer realm="geocoding"`}
	w = get(ratelimit.KeyByAPIKey("X-API-Key"), configured)
	assert.Equal(t, 401, w.Code)
	assert.Equal(t, `Bearer realm="geocoding"`, w.Header().Get("WWW-Authenticate"))

	w = get(ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{Challenge: "Bearer", Cost: costByHeader}, header("X-API-Key", "k"), header("X-Cost", "-1"))
	assert.Equal(t, 400, w.Code)
	assert.Empty(t, w.Header().Values("WWW-Authenticate"), "only a 401 challenges")

	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(5)})
	require.NoError(t, err)
	for _, bad := range []string{"Bearer\r\nSet-Cookie: a=b", " Bearer", "Bearer\x00"} {
		_, err := ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{Challenge: bad})
		assert.ErrorContains(t, err, "MiddlewareOptions.Challenge", "%q", bad)
	}
}

// The first refusal of each kind is logged at the warning level, once per
// Middleware, whatever its OnError; the others only at the debug level.
func TestFirstRefusalLoggedOnce(t *testing.T) {
	for _, custom := range []bool{false, true} {
		var logs bytes.Buffer
		opts := &ratelimit.MiddlewareOptions{Cost: costByHeader, Logger: lineLogger(&logs, slog.LevelInfo)}
		if custom {
			opts.OnError = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusTeapot) }
		}
		lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Name: "api", Limit: ratelimit.PerSecond(5).WithBurst(10)})
		require.NoError(t, err)
		m, err := ratelimit.NewMiddleware(lim, ratelimit.KeyByAPIKey("X-API-Key"), opts)
		require.NoError(t, err)
		h := nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		serve := func(n int, prepare ...func(*http.Request) *http.Request) {
			for range n {
				r := httptest.NewRequest(http.MethodPost, "/v1/geocode", nil)
				for _, p := range prepare {
					r = p(r)
				}
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
		}
		serve(100)
		assert.Equal(t, 1, strings.Count(logs.String(), "refusal=missing-key"), "custom OnError %v: %s", custom, logs.String())
		assert.Equal(t, 1, strings.Count(logs.String(), "level=WARN"), logs.String())
		assert.Contains(t, logs.String(), `detail="the request carries no X-API-Key header" method=POST path=/v1/geocode`)
		serve(100, header("X-API-Key", "k"), header("X-Cost", "lots"))
		serve(100, header("X-API-Key", "k"), header("X-Cost", "-1"))
		serve(100, header("X-API-Key", "k"), header("X-Cost", "11"))
		assert.Equal(t, 1, strings.Count(logs.String(), "refusal=cost "), "the cost function and a negative cost are one kind: %s", logs.String())
		assert.Equal(t, 1, strings.Count(logs.String(), "refusal=cost-above-burst"), logs.String())
		assert.Equal(t, 3, strings.Count(logs.String(), "\n"), "one line per kind over 400 refusals: %s", logs.String())
	}

	// Each Middleware logs its own first refusals; at the debug level,
	// one warning and 99 debug lines.
	var logs bytes.Buffer
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(5)})
	require.NoError(t, err)
	for range 2 {
		m, err := ratelimit.NewMiddleware(lim, ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{Logger: lineLogger(&logs, slog.LevelDebug)})
		require.NoError(t, err)
		h := nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		for range 100 {
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
		}
	}
	assert.Equal(t, 2, strings.Count(logs.String(), "level=WARN"), logs.String())
	assert.Equal(t, 198, strings.Count(logs.String(), "level=DEBUG"))
}
