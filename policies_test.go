package ratelimit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/refusers"
	"github.com/tokenfair/ratelimit/nethttp"
)

// policyServer serves requests keyed by X-Client (cost from X-Cost) under
// policies, on a memory store with a fake clock.
func policyServer(t *testing.T, policies []ratelimit.Policy, opts *ratelimit.MiddlewareOptions) *server {
	t.Helper()
	s := &server{t: t, clock: new(fakeClock)}
	lim, err := ratelimit.New(clockStore(t, s.clock), policies...)
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, withCost(opts))
	require.NoError(t, err)
	s.handler = nethttp.Wrap(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.calls++ }))
	return s
}

var (
	perKey = ratelimit.Policy{Name: "per-key", Limit: ratelimit.PerSecond(5).WithBurst(10)}
	daily  = ratelimit.Policy{Name: "daily", Limit: ratelimit.Per(10000, 24*time.Hour)}
	global = ratelimit.Policy{Name: "global", Limit: ratelimit.PerSecond(200).WithBurst(4), Global: true}
)

func TestPoliciesOverHTTP(t *testing.T) {
	s := policyServer(t, []ratelimit.Policy{perKey, daily, global}, nil)
	w := s.get("a")
	require.Equal(t, 200, w.Code)
	assert.Equal(t, `"per-key";q=10;w=2,"daily";q=10000;w=86400,"global";q=4;w=1`, field(w.Header(), "RateLimit-Policy"))
	assert.Equal(t, `"global";r=3;t=1`, field(w.Header(), "RateLimit"), "the policy closest to exhaustion")

	for _, c := range []string{"b", "c", "d"} {
		require.Equal(t, 200, s.get(c).Code)
	}
	w = s.get("e")
	require.Equal(t, 429, w.Code, "the global burst of 4 is spent")
	assert.Equal(t, `"global";r=0;t=1`, field(w.Header(), "RateLimit"))
	var body map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
	assert.Equal(t, []any{"global"}, body["violated-policies"])

	// Both policies refuse: the longest wait is Retry-After and binds the
	// RateLimit field, and the body names both.
	slow := ratelimit.Policy{Name: "slow", Limit: ratelimit.Per(1, 10*time.Second)}
	fast := ratelimit.Policy{Name: "fast", Limit: ratelimit.Per(1, 2*time.Second), Global: true}
	s = policyServer(t, []ratelimit.Policy{fast, slow}, nil)
	require.Equal(t, 200, s.get("a").Code)
	w = s.get("a")
	require.Equal(t, 429, w.Code)
	assert.Equal(t, "10", w.Header().Get("Retry-After"))
	assert.Equal(t, `"slow";r=0;t=10`, field(w.Header(), "RateLimit"))
	body = nil
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
	assert.Equal(t, []any{"fast", "slow"}, body["violated-policies"])
}

func TestPoliciesCostAboveOneBurst(t *testing.T) {
	s := policyServer(t, []ratelimit.Policy{perKey, global}, nil)
	w := s.get("a", "X-Cost", "5")
	assert.Equal(t, http.StatusBadRequest, w.Code, "the global burst of 4 can never allow a cost of 5")
	assert.Equal(t, 200, s.get("a", "X-Cost", "4").Code)
}

// TestCostBelowOneIsRefused: a cost of 0 would only look at the bucket, so
// a client that can pick it (?count=0) would pass an empty bucket at will.
func TestCostBelowOneIsRefused(t *testing.T) {
	s := policyServer(t, []ratelimit.Policy{perKey}, nil)
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
	assert.Equal(t, 1, s.calls, "only the first request reached the handler")
}

// TestTiers: one middleware, a limiter per plan chosen per request.
func TestTiers(t *testing.T) {
	clock := new(fakeClock)
	store := clockStore(t, clock)
	free, err := ratelimit.New(store, ratelimit.Policy{Name: "free", Limit: ratelimit.Per(2, time.Minute)})
	require.NoError(t, err)
	pro, err := ratelimit.New(store, ratelimit.Policy{Name: "pro", Limit: ratelimit.Per(5, time.Minute)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(free, keyByHeader, &ratelimit.MiddlewareOptions{LimiterFor: func(r *http.Request) *ratelimit.Limiter {
		if r.Header.Get("X-Plan") == "pro" {
			return pro
		}
		return nil
	}})
	require.NoError(t, err)
	h := nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	s := &server{t: t, clock: clock, handler: h}
	var freeCodes, proCodes []int
	for range 6 {
		freeCodes = append(freeCodes, s.get("x").Code)
		proCodes = append(proCodes, s.get("y", "X-Plan", "pro").Code)
	}
	assert.Equal(t, []int{200, 200, 429, 429, 429, 429}, freeCodes)
	assert.Equal(t, []int{200, 200, 200, 200, 200, 429}, proCodes)
	assert.Equal(t, `"pro";q=5;w=60`, field(s.get("z", "X-Plan", "pro").Header(), "RateLimit-Policy"))
}

func TestDryRunOverHTTP(t *testing.T) {
	shadow := ratelimit.Policy{Name: "shadow", Limit: ratelimit.Per(1, time.Minute), DryRun: true}
	s := policyServer(t, []ratelimit.Policy{perKey, shadow}, nil)
	for range 3 {
		w := s.get("a")
		require.Equal(t, 200, w.Code, "a dry-run policy never refuses")
		assert.Equal(t, `"per-key";q=10;w=2`, field(w.Header(), "RateLimit-Policy"), "and is invisible by default")
	}

	s = policyServer(t, []ratelimit.Policy{perKey, shadow}, &ratelimit.MiddlewareOptions{DryRunHeaders: true})
	w := s.get("a")
	assert.Equal(t, `"per-key";q=10;w=2,"shadow";q=1;w=60`, field(w.Header(), "RateLimit-Policy"))
	assert.Equal(t, `"shadow";r=0;t=60`, field(w.Header(), "RateLimit"), "shown when asked")
	w = s.get("a")
	assert.Equal(t, 200, w.Code)
	assert.Equal(t, `"shadow";r=0;t=60`, field(w.Header(), "RateLimit"))
}

func TestPolicyConstructorErrors(t *testing.T) {
	store := memoryStore(t)
	_, err := ratelimit.New(store)
	assert.ErrorContains(t, err, "no policy")
	_, err = ratelimit.New(store, perKey, perKey)
	assert.ErrorContains(t, err, `two policies named "per-key"`)
	_, err = ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(1), Immediate: 1})
	assert.ErrorContains(t, err, "apply to leaky-shape only")
	_, err = ratelimit.NewMiddleware(nil, keyByHeader, nil)
	assert.Error(t, err)
}

// A Limiter of several policies reports the binding policy's result, every
// policy's result in Results, and points each Result at the limiter's own
// Policy.
func TestResultsPerPolicy(t *testing.T) {
	shadow := ratelimit.Policy{Name: "shadow", Limit: ratelimit.Per(1, time.Minute), DryRun: true}
	lim, err := ratelimit.New(clockStore(t, new(fakeClock)), perKey, daily, shadow)
	require.NoError(t, err)
	ps := lim.Policies()
	require.Len(t, ps, 3)
	ctx := context.Background()

	res, err := lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Same(t, &ps[0], res.Policy, "per-key has the fewest tokens left")
	assert.Equal(t, int64(9), res.Remaining)
	require.Len(t, res.Results, 3)
	for i, r := range res.Results {
		assert.Same(t, &ps[i], r.Policy, "Results()[%d]", i)
	}
	assert.Equal(t, int64(9999), res.Results[1].Remaining)
	assert.Nil(t, refusers.Names(res, false))
	assert.Nil(t, refusers.Names(res, true))

	res, err = lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, []string{"shadow"}, refusers.Names(res, true))

	res, err = lim.Take(ctx, "k", 9)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.Same(t, &ps[0], res.Policy)
	assert.Equal(t, []string{"per-key"}, refusers.Names(res, false))
	assert.Equal(t, ratelimit.PerSecond(5).WithBurst(10), res.Policy.Limit)
	assert.Equal(t, "5/s burst 10", res.Policy.Limit.String())
	assert.True(t, res.Results[1].Allowed, "daily would have allowed it")
	assert.Equal(t, int64(9998-9), res.Results[1].Remaining, "what daily would have left had the request passed")
	look, err := lim.Take(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(9998), look.Results[1].Remaining, "the refused request spent nothing from daily")
}

// TestDryRunLookDecidesByTheAlgorithm: when an enforcing policy refuses, a
// dry-run policy only looks at its bucket, and says whether the request
// would have passed as its own algorithm decides: a shaping queue admits
// a cost whose wait fits, whatever its Remaining (which counts requests of
// cost 1), and a would-be refusal says when the request would pass.
func TestDryRunLookDecidesByTheAlgorithm(t *testing.T) {
	clock := new(fakeClock)
	shape := ratelimit.Policy{Name: "shape", Limit: ratelimit.PerSecond(1).WithBurst(10), Algorithm: ratelimit.LeakyShape, DryRun: true}
	lim, err := ratelimit.New(clockStore(t, clock), ratelimit.Policy{Name: "tb", Limit: ratelimit.PerSecond(5)}, shape)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = lim.Take(ctx, "k", 5) // the queue empties 5 s from now
	require.NoError(t, err)
	clock.Advance(time.Second)
	_, err = lim.Take(ctx, "k", 4) // then 8 s from now
	require.NoError(t, err)
	res, err := lim.Take(ctx, "k", 5)
	require.NoError(t, err)
	require.Equal(t, []string{"tb"}, refusers.Names(res, false))
	assert.Nil(t, refusers.Names(res, true), "a wait of 8 s fits the queue's 10 s")
	assert.True(t, res.Results[1].Allowed)

	// A queue 3 s long, of 2 s room: a would-be refusal, by 1 s.
	clock = new(fakeClock)
	shape.Limit = ratelimit.PerSecond(1).WithBurst(2)
	lim, err = ratelimit.New(clockStore(t, clock), ratelimit.Policy{Name: "tb", Limit: ratelimit.PerSecond(1).WithBurst(3)}, shape)
	require.NoError(t, err)
	for _, cost := range []int64{2, 1} { // the queue then empties 3 s from now
		res, err = lim.Take(ctx, "k", cost)
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	res, err = lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	require.Equal(t, []string{"tb"}, refusers.Names(res, false))
	assert.Equal(t, []string{"shape"}, refusers.Names(res, true))
	assert.Equal(t, time.Second, res.Results[1].RetryAfter, "3 s of wait against 2 s of room")
}

// TestDryRunHeadersOnRefusals: with DryRunHeaders, a refusal's RateLimit
// is the refusing policy's, so that its t is Retry-After (jitter
// included), even when a dry-run policy would wait longer; and
// RateLimit-Policy lists every policy on every answer, in-flight
// refusals included, as one valid list.
func TestDryRunHeadersOnRefusals(t *testing.T) {
	perKey := ratelimit.Policy{Name: "per-key", Limit: ratelimit.PerSecond(2).WithBurst(4)}
	dry := ratelimit.Policy{Name: "dry", Limit: ratelimit.Per(3, time.Minute), DryRun: true}
	for _, jitter := range []time.Duration{0, 3 * time.Second} {
		s := policyServer(t, []ratelimit.Policy{perKey, dry}, &ratelimit.MiddlewareOptions{DryRunHeaders: true, RetryJitter: jitter})
		for range 4 {
			require.Equal(t, 200, s.get("a").Code)
		}
		w := s.get("a")
		require.Equal(t, 429, w.Code)
		assert.Equal(t, `"per-key";q=4;w=2,"dry";q=3;w=60`, field(w.Header(), "RateLimit-Policy"))
		assert.Equal(t, `"per-key";r=0;t=`+w.Header().Get("Retry-After"), field(w.Header(), "RateLimit"), "jitter %v", jitter)
	}

	lim, err := ratelimit.New(clockStore(t, new(fakeClock)), dry)
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{DryRunHeaders: true, MaxInFlight: 1})
	require.NoError(t, err)
	request := func() *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Client", "a")
		return r
	}
	first, second := httptest.NewRecorder(), httptest.NewRecorder()
	m.Handle(first, request(), func(*http.Request) int {
		m.Handle(second, request(), func(*http.Request) int { return 200 }) // while the first holds the slot
		return 200
	})
	require.Equal(t, 429, second.Code)
	assert.Equal(t, `"dry";q=3;w=60,"inflight";q=1;qu="concurrent-requests"`, field(second.Header(), "RateLimit-Policy"))
	assert.Equal(t, `"dry";q=3;w=60,"inflight";q=1;qu="concurrent-requests"`, field(first.Header(), "RateLimit-Policy"), "the same list when allowed")
}
