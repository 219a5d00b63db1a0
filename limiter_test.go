package ratelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/refusers"
)

// remaining returns what key has left under lim's policies, in order,
// looking without spending.
func remaining(t *testing.T, lim *ratelimit.Limiter, key string) []int64 {
	t.Helper()
	res, err := lim.Take(context.Background(), key, 0)
	require.NoError(t, err)
	if res.Results == nil {
		return []int64{res.Remaining}
	}
	var left []int64
	for _, r := range res.Results {
		left = append(left, r.Remaining)
	}
	return left
}

// Refund gives back what an allowed Take spent, in part or in whole.
func TestLimiterRefund(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		refund []int64 // the give-backs of the take of 6, in turn
		want   int64   // what is left then, of 10
	}{
		{nil, 1},
		{[]int64{2}, 3},
		{[]int64{6}, 7},
		{[]int64{2, 3}, 6},
		{[]int64{0, -3}, 1},
	} {
		lim := newHarness(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.Per(10, time.Hour)}}}).lim
		_, err := lim.Take(ctx, "k", 3)
		require.NoError(t, err)
		took, err := lim.Take(ctx, "k", 6)
		require.NoError(t, err)
		require.True(t, took.Allowed)
		for _, n := range tc.refund {
			require.NoError(t, lim.Refund(ctx, "k", n, took), "Refund(%d)", n)
		}
		assert.Equal(t, []int64{tc.want}, remaining(t, lim, "k"), "after the give-backs %v of a take of 6", tc.refund)
	}
}

// Refund of a refused or degraded Result, or of one this Limiter did not
// make, gives back nothing.
func TestLimiterRefundNothing(t *testing.T) {
	ctx := context.Background()
	lim := newHarness(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.Per(3, time.Hour)}}}).lim
	_, err := lim.Take(ctx, "k", 2)
	require.NoError(t, err)
	refused, err := lim.Take(ctx, "k", 2)
	require.NoError(t, err)
	require.False(t, refused.Allowed)
	require.NoError(t, lim.Refund(ctx, "k", 2, refused))
	assert.Equal(t, []int64{1}, remaining(t, lim, "k"), "a refusal spent nothing")

	took, err := lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, took.Allowed)
	degraded := took
	degraded.Degraded = true
	require.NoError(t, lim.Refund(ctx, "k", 1, degraded))
	assert.Equal(t, []int64{0}, remaining(t, lim, "k"), "a degraded result is no take of the store")
	made := ratelimit.Result{Allowed: true, Policy: &lim.Policies()[0]}
	require.NoError(t, lim.Refund(ctx, "k", 1, made))
	assert.Equal(t, []int64{0}, remaining(t, lim, "k"), "a Result not of Take spent nothing")
}

// Refund refuses an empty key, and a Result of another Limiter, giving
// back nothing.
func TestLimiterRefundErrors(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.Per(3, time.Hour)}}})
	other, err := ratelimit.New(h.store, ratelimit.Policy{Name: "api", Limit: ratelimit.Per(3, time.Hour)})
	require.NoError(t, err)
	took, err := h.lim.Take(ctx, "k", 2)
	require.NoError(t, err)
	assert.ErrorIs(t, h.lim.Refund(ctx, "", 2, took), ratelimit.ErrMissingKey)
	err = other.Refund(ctx, "k", 2, took)
	assert.ErrorContains(t, err, `the Result is not of this Limiter's Take (its policy: "api")`)
	assert.Equal(t, []int64{1}, remaining(t, h.lim, "k"), "nothing given back")
}

// With several policies, Refund gives back to each policy that spent, dry-run
// ones included.
func TestLimiterRefundPolicies(t *testing.T) {
	ctx := context.Background()
	for refund, want := range map[int64][]int64{2: {2, 5, 3}, 4: {4, 7, 5}} {
		lim := newHarness(t, setup{policies: []ratelimit.Policy{
			{Name: "burst", Limit: ratelimit.PerSecond(1).WithBurst(5)},
			{Name: "hourly", Limit: ratelimit.Per(8, time.Hour)},
			{Name: "shadow", Limit: ratelimit.Per(6, time.Hour), DryRun: true},
		}}).lim
		_, err := lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		took, err := lim.Take(ctx, "k", 4)
		require.NoError(t, err)
		require.True(t, took.Allowed)
		require.Equal(t, []int64{0, 3, 1}, remaining(t, lim, "k"))
		require.NoError(t, lim.Refund(ctx, "k", refund, took))
		assert.Equal(t, want, remaining(t, lim, "k"), "Refund(%d) of a take of 4", refund)
	}
}

// refundFails is a store whose give-backs fail.
type refundFails struct{ ratelimit.Store }

func (refundFails) Refund(context.Context, *ratelimit.Policy, string, int64, ratelimit.Result) error {
	return errors.New("connection reset")
}

// A store that cannot give back makes Refund fail with ErrStore; a store
// without Refund makes it do nothing.
func TestLimiterRefundStore(t *testing.T) {
	ctx := context.Background()
	p := ratelimit.Policy{Name: "api", Limit: ratelimit.Per(3, time.Hour)}
	lim := newHarness(t, setup{policies: []ratelimit.Policy{p}, wrap: func(s ratelimit.Store) ratelimit.Store { return refundFails{s} }}).lim
	took, err := lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	err = lim.Refund(ctx, "k", 1, took)
	assert.ErrorIs(t, err, ratelimit.ErrStore)
	assert.ErrorContains(t, err, "connection reset")

	type takeOnly struct{ ratelimit.Store }
	lim = newHarness(t, setup{policies: []ratelimit.Policy{p}, wrap: func(s ratelimit.Store) ratelimit.Store { return takeOnly{s} }}).lim
	took, err = lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.NoError(t, lim.Refund(ctx, "k", 1, took))
	assert.Equal(t, []int64{2}, remaining(t, lim, "k"))
}

// handBuiltStore answers every request as allowed with a Result it builds
// itself, without the Policy, as a decorating store might.
type handBuiltStore struct{}

func (handBuiltStore) Take(context.Context, *ratelimit.Policy, string, int64) (ratelimit.Result, error) {
	return ratelimit.Result{Allowed: true, Remaining: 4}, nil
}

// A store that leaves Result.Policy nil gets the policy it was asked about
// filled in: the middleware answers with its header fields, never panics.
func TestStoreResultWithoutPolicy(t *testing.T) {
	h := newHarness(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(5)}}, store: handBuiltStore{}})
	res, err := h.lim.Take(context.Background(), "k", 1)
	require.NoError(t, err)
	require.NotNil(t, res.Policy)
	assert.Equal(t, "api", res.Policy.Name)

	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Client", "c")
	w, _ := h.handle(r)
	assert.Equal(t, []string{`"api";r=4`}, w.Header()["RateLimit"])

	two := newHarness(t, setup{policies: []ratelimit.Policy{{Name: "a", Limit: ratelimit.PerSecond(5)}, {Name: "b", Limit: ratelimit.Per(5, 24*time.Hour)}}, store: handBuiltStore{}}).lim
	res, err = two.Take(context.Background(), "k", 1)
	require.NoError(t, err)
	for i, r := range res.Results {
		assert.Same(t, &two.Policies()[i], r.Policy, "the Result of policy %d", i)
	}
}

func TestConstructorErrors(t *testing.T) {
	good := ratelimit.Policy{Limit: ratelimit.PerSecond(1)}
	store := newHarness(t, setup{policies: []ratelimit.Policy{good}}).store
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

func TestLimiterTakeErrors(t *testing.T) {
	lim := newHarness(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(5)}}}).lim
	ctx := context.Background()
	_, err := lim.Take(ctx, "", 1)
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

	failing := newHarness(t, setup{limit: ratelimit.PerSecond(5), store: failingStore{errors.New("boom")}}).lim
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

// A BatchStore that cannot decide a batch atomically says ErrNotAtomic, and
// the Limiter decides the policies one at a time instead: the caller never
// sees that error.
func TestNotAtomicFallsBack(t *testing.T) {
	h := newHarness(t, setup{
		policies: []ratelimit.Policy{
			{Name: "burst", Limit: ratelimit.Per(3, time.Minute)},
			{Name: "sustained", Limit: ratelimit.Per(5, time.Hour)},
		},
		wrap: func(s ratelimit.Store) ratelimit.Store { return &notAtomicStore{Store: s} },
	})
	store, lim := h.store.(*notAtomicStore), h.lim
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

var (
	perKey = ratelimit.Policy{Name: "per-key", Limit: ratelimit.PerSecond(5).WithBurst(10)}
	daily  = ratelimit.Policy{Name: "daily", Limit: ratelimit.Per(10000, 24*time.Hour)}
	global = ratelimit.Policy{Name: "global", Limit: ratelimit.PerSecond(200).WithBurst(4), Global: true}
)

func TestPoliciesOverHTTP(t *testing.T) {
	s := newHarness(t, setup{policies: []ratelimit.Policy{perKey, daily, global}})
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
	s = newHarness(t, setup{policies: []ratelimit.Policy{fast, slow}})
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
	s := newHarness(t, setup{policies: []ratelimit.Policy{perKey, global}, opts: &ratelimit.MiddlewareOptions{Cost: costByHeader}})
	w := s.get("a", "X-Cost", "5")
	assert.Equal(t, http.StatusBadRequest, w.Code, "the global burst of 4 can never allow a cost of 5")
	assert.Equal(t, 200, s.get("a", "X-Cost", "4").Code)
}

func TestPolicyConstructorErrors(t *testing.T) {
	store := newHarness(t, setup{policies: []ratelimit.Policy{perKey}}).store
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
	lim := newHarness(t, setup{policies: []ratelimit.Policy{perKey, daily, shadow}}).lim
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
	shape := ratelimit.Policy{Name: "shape", Limit: ratelimit.PerSecond(1).WithBurst(10), Algorithm: ratelimit.LeakyShape, DryRun: true}
	h := newHarness(t, setup{policies: []ratelimit.Policy{{Name: "tb", Limit: ratelimit.PerSecond(5)}, shape}})
	lim := h.lim
	ctx := context.Background()
	_, err := lim.Take(ctx, "k", 5) // the queue empties 5 s from now
	require.NoError(t, err)
	h.clock.Advance(time.Second)
	_, err = lim.Take(ctx, "k", 4) // then 8 s from now
	require.NoError(t, err)
	res, err := lim.Take(ctx, "k", 5)
	require.NoError(t, err)
	require.Equal(t, []string{"tb"}, refusers.Names(res, false))
	assert.Nil(t, refusers.Names(res, true), "a wait of 8 s fits the queue's 10 s")
	assert.True(t, res.Results[1].Allowed)

	// A queue 3 s long, of 2 s room: a would-be refusal, by 1 s.
	shape.Limit = ratelimit.PerSecond(1).WithBurst(2)
	lim = newHarness(t, setup{policies: []ratelimit.Policy{{Name: "tb", Limit: ratelimit.PerSecond(1).WithBurst(3)}, shape}}).lim
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
