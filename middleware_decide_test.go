package ratelimit_test

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

func TestCostsChecked(t *testing.T) {
	lim := meters(t)
	for _, tc := range []struct {
		costs map[string]func(*http.Request) (int64, error)
		err   string
	}{
		{map[string]func(*http.Request) (int64, error){"requests": nil}, `ratelimit: MiddlewareOptions.Costs["requests"]: the cost of requests is MiddlewareOptions.Cost`},
		{map[string]func(*http.Request) (int64, error){"Tokens": nil}, `ratelimit: MiddlewareOptions.Costs: unit "Tokens": want 1 to 64 characters from [a-z0-9._-], starting with a letter`},
		{map[string]func(*http.Request) (int64, error){"tokens": nil}, `ratelimit: MiddlewareOptions.Costs["tokens"]: nil function`},
	} {
		_, err := ratelimit.NewMiddleware(lim, ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{Costs: tc.costs})
		assert.EqualError(t, err, tc.err)
	}
	_, err := ratelimit.New(new(memorystore.Store), ratelimit.Policy{Limit: ratelimit.PerSecond(1), Unit: "Bytes"})
	assert.EqualError(t, err, `ratelimit: policy "default": unit "Bytes": want 1 to 64 characters from [a-z0-9._-], starting with a letter`)
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
