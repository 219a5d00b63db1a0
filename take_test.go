package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
	"github.com/tokenfair/ratelimit/internal/refusers"
	"github.com/tokenfair/ratelimit/memorystore"
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
		lim := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.Per(10, time.Hour)}}}).lim
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
	lim := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.Per(3, time.Hour)}}}).lim
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
	h := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.Per(3, time.Hour)}}})
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
		lim := newEngine(t, setup{policies: []ratelimit.Policy{
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
	lim := newEngine(t, setup{policies: []ratelimit.Policy{p}, wrap: func(s ratelimit.Store) ratelimit.Store { return refundFails{s} }}).lim
	took, err := lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	err = lim.Refund(ctx, "k", 1, took)
	assert.ErrorIs(t, err, ratelimit.ErrStore)
	assert.ErrorContains(t, err, "connection reset")

	type takeOnly struct{ ratelimit.Store }
	lim = newEngine(t, setup{policies: []ratelimit.Policy{p}, wrap: func(s ratelimit.Store) ratelimit.Store { return takeOnly{s} }}).lim
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
// filled in (TestStoreResultWithoutPolicyFields: and the middleware
// answers with its header fields).
func TestStoreResultWithoutPolicy(t *testing.T) {
	h := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(5)}}, store: handBuiltStore{}})
	res, err := h.lim.Take(context.Background(), "k", 1)
	require.NoError(t, err)
	require.NotNil(t, res.Policy)
	assert.Equal(t, "api", res.Policy.Name)

	two := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "a", Limit: ratelimit.PerSecond(5)}, {Name: "b", Limit: ratelimit.Per(5, 24*time.Hour)}}, store: handBuiltStore{}}).lim
	res, err = two.Take(context.Background(), "k", 1)
	require.NoError(t, err)
	for i, r := range res.Results {
		assert.Same(t, &two.Policies()[i], r.Policy, "the Result of policy %d", i)
	}
}

func TestConstructorErrors(t *testing.T) {
	good := ratelimit.Policy{Limit: ratelimit.PerSecond(1)}
	store := newEngine(t, setup{policies: []ratelimit.Policy{good}}).store
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
	lim := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(5)}}}).lim
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

	failing := newEngine(t, setup{limit: ratelimit.PerSecond(5), store: failingStore{errors.New("boom")}}).lim
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
	return errors.ErrUnsupported
}

// A BatchStore that cannot decide a batch atomically says
// errors.ErrUnsupported, and the Limiter decides the policies one at a time instead: the caller never
// sees that error.
func TestNotAtomicFallsBack(t *testing.T) {
	h := newEngine(t, setup{
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

func TestPolicyConstructorErrors(t *testing.T) {
	store := newEngine(t, setup{policies: []ratelimit.Policy{perKey}}).store
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
	lim := newEngine(t, setup{policies: []ratelimit.Policy{perKey, daily, shadow}}).lim
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
	h := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "tb", Limit: ratelimit.PerSecond(5)}, shape}})
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
	lim = newEngine(t, setup{policies: []ratelimit.Policy{{Name: "tb", Limit: ratelimit.PerSecond(1).WithBurst(3)}, shape}}).lim
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

// The harness's clock starts at 2026-01-01T00:00:00Z: the first day's
// quota resets at untilMidnight.
const untilMidnight = 24 * time.Hour

// takeStep is one Take of key and what it must give: whether it passes,
// which enforcing policies refuse it, its RetryAfter, and what each policy
// has left then (a look).
type takeStep struct {
	advance time.Duration // the clock moves on first
	cost    int64
	allowed bool
	refused []string
	retry   time.Duration
	left    []int64
}

// runTakes takes steps in turn for key "k" on h.
func runTakes(t *testing.T, h *engine, steps []takeStep) {
	t.Helper()
	ctx := context.Background()
	for i, s := range steps {
		h.clock.Advance(s.advance)
		res, err := h.lim.Take(ctx, "k", s.cost)
		require.NoError(t, err, "step %d", i)
		assert.Equal(t, s.allowed, res.Allowed, "step %d: Take(%d).Allowed", i, s.cost)
		assert.Equal(t, s.refused, refusers.Names(res, false), "step %d: Take(%d): refused by", i, s.cost)
		assert.Equal(t, s.retry, res.RetryAfter, "step %d: Take(%d).RetryAfter", i, s.cost)
		assert.Equal(t, s.left, remaining(t, h.lim, "k"), "step %d: left after Take(%d)", i, s.cost)
	}
}

// A rate and a daily quota decide together: a request refused by either
// spends nothing from the other, with or without a store that decides them
// in one step, and the quota comes back whole at midnight, not before.
func TestQuotaWithRate(t *testing.T) {
	policies := []ratelimit.Policy{
		{Name: "rate", Limit: ratelimit.PerSecond(5).WithBurst(10)},
		{Name: "daily", Limit: ratelimit.Daily(25, time.UTC)},
	}
	steps := []takeStep{
		{cost: 10, allowed: true, left: []int64{0, 15}},
		{cost: 1, refused: []string{"rate"}, retry: 200 * time.Millisecond, left: []int64{0, 15}},
		{advance: 2 * time.Second, cost: 10, allowed: true, left: []int64{0, 5}},
		{advance: 2 * time.Second, cost: 10, refused: []string{"daily"}, retry: untilMidnight - 4*time.Second, left: []int64{10, 5}},
		{cost: 5, allowed: true, left: []int64{5, 0}},
		{cost: 1, refused: []string{"daily"}, retry: untilMidnight - 4*time.Second, left: []int64{5, 0}},
		{advance: untilMidnight - 4*time.Second - 1, cost: 1, refused: []string{"daily"}, retry: 1, left: []int64{10, 0}},
		{advance: 1, cost: 1, allowed: true, left: []int64{9, 24}},
		{cost: 10, refused: []string{"rate"}, retry: 200 * time.Millisecond, left: []int64{9, 24}},
	}
	runTakes(t, newEngine(t, setup{policies: policies}), steps)
	runTakes(t, newEngine(t, setup{policies: policies, wrap: func(s ratelimit.Store) ratelimit.Store { return &notAtomicStore{Store: s} }}), steps)
}

// A dry-run quota counts and reports what it would refuse, also when an
// enforcing policy refuses first (a look: would the cost have fit?).
func TestQuotaDryRun(t *testing.T) {
	h := newEngine(t, setup{policies: []ratelimit.Policy{
		{Name: "rate", Limit: ratelimit.PerSecond(5).WithBurst(10)},
		{Name: "daily", Limit: ratelimit.Daily(12, time.UTC), DryRun: true},
	}})
	ctx := context.Background()
	take := func(cost int64, allowed, wouldAllow bool, wouldRetry time.Duration, left []int64) {
		t.Helper()
		res, err := h.lim.Take(ctx, "k", cost)
		require.NoError(t, err)
		assert.Equal(t, allowed, res.Allowed, "Take(%d).Allowed", cost)
		var dry []string
		if !wouldAllow {
			dry = []string{"daily"}
		}
		assert.Equal(t, dry, refusers.Names(res, true), "Take(%d): the dry-run refusals", cost)
		assert.Equal(t, wouldRetry, res.Results[1].RetryAfter, "Take(%d): the quota's RetryAfter", cost)
		assert.Equal(t, left, remaining(t, h.lim, "k"), "left after Take(%d)", cost)
	}
	take(10, true, true, 0, []int64{0, 2})
	take(1, false, true, 0, []int64{0, 2})              // the rate refuses; the quota would allow
	take(3, false, false, untilMidnight, []int64{0, 2}) // the rate refuses; so would the quota
	h.clock.Advance(2 * time.Second)
	take(3, true, false, untilMidnight-2*time.Second, []int64{7, 2}) // the quota would refuse, and spends nothing
	take(2, true, true, 0, []int64{5, 0})
	take(5, true, false, untilMidnight-2*time.Second, []int64{0, 0})
	h.clock.Advance(untilMidnight - 2*time.Second)
	take(10, true, true, 0, []int64{0, 2})
}

// Reset gives a key its whole quota back before midnight.
func TestQuotaReset(t *testing.T) {
	h := newEngine(t, setup{policies: []ratelimit.Policy{
		{Name: "rate", Limit: ratelimit.PerSecond(5).WithBurst(10)},
		{Name: "daily", Limit: ratelimit.Daily(25, time.UTC)},
		{Name: "monthly", Limit: ratelimit.Monthly(100, time.UTC)},
	}})
	ctx := context.Background()
	for range 2 {
		_, err := h.lim.Take(ctx, "k", 10)
		require.NoError(t, err)
		h.clock.Advance(2 * time.Second)
	}
	require.Equal(t, []int64{10, 5, 80}, remaining(t, h.lim, "k"))
	require.NoError(t, h.lim.Reset(ctx, "k"))
	assert.Equal(t, []int64{10, 25, 100}, remaining(t, h.lim, "k"))
	res, err := h.lim.Take(ctx, "k", 10)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	assert.Equal(t, []int64{0, 15, 90}, remaining(t, h.lim, "k"), "the quotas count again from full")
}

// A quota's refusals count toward its penalty box: a key that keeps asking
// once its quota is spent is banned, and stays banned past the reset.
func TestQuotaPenalty(t *testing.T) {
	h := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "daily", Limit: ratelimit.Daily(2, time.UTC),
		Penalty: ratelimit.Penalty{After: 2, Within: time.Minute, For: 10 * time.Minute}}}})
	ctx := context.Background()
	take := func(cost int64) ratelimit.Result {
		t.Helper()
		res, err := h.lim.Take(ctx, "k", cost)
		require.NoError(t, err)
		require.Len(t, res.Results, 1)
		return res
	}
	h.clock.Advance(untilMidnight - 5*time.Minute) // 23:55
	for range 2 {
		require.True(t, take(1).Allowed)
	}
	res := take(1)
	require.False(t, res.Allowed)
	assert.Equal(t, "daily", res.Results[0].Policy.Name)
	assert.Equal(t, 5*time.Minute, res.RetryAfter, "the first refusal waits for midnight")

	h.clock.Advance(30 * time.Second)
	res = take(1)
	require.False(t, res.Allowed)
	assert.Equal(t, "daily/ban", res.Results[0].Policy.Name, "the second refusal within a minute bans")
	assert.Equal(t, 10*time.Minute, res.RetryAfter)

	h.clock.Advance(4*time.Minute + 30*time.Second) // midnight: the quota is back, the ban holds
	res = take(1)
	assert.False(t, res.Allowed)
	assert.Equal(t, "daily/ban", res.Results[0].Policy.Name)
	assert.Equal(t, 5*time.Minute+30*time.Second, res.RetryAfter)
	h.clock.Advance(5*time.Minute + 30*time.Second)
	res = take(1)
	assert.True(t, res.Allowed, "the ban is over")
	assert.Equal(t, int64(1), res.Remaining, "of a new day's quota")
}

// Limiter.Refund gives a quota's tokens back within the day; after
// midnight it gives back nothing, neither more than the quota nor any of
// the new day's spending.
func TestQuotaLimiterRefund(t *testing.T) {
	ctx := context.Background()
	h := newEngine(t, setup{policies: []ratelimit.Policy{{Name: "daily", Limit: ratelimit.Daily(10, time.UTC)}}})
	took, err := h.lim.Take(ctx, "k", 6)
	require.NoError(t, err)
	require.True(t, took.Allowed)
	h.clock.Advance(time.Hour)
	require.NoError(t, h.lim.Refund(ctx, "k", 2, took))
	assert.Equal(t, []int64{6}, remaining(t, h.lim, "k"), "2 of 6 given back")
	require.NoError(t, h.lim.Refund(ctx, "k", 4, took))
	assert.Equal(t, []int64{10}, remaining(t, h.lim, "k"), "all 6 given back")

	took, err = h.lim.Take(ctx, "k", 6)
	require.NoError(t, err)
	h.clock.Advance(untilMidnight - time.Hour)
	require.Equal(t, []int64{10}, remaining(t, h.lim, "k"), "midnight")
	require.NoError(t, h.lim.Refund(ctx, "k", 2, took))
	assert.Equal(t, []int64{10}, remaining(t, h.lim, "k"), "a full quota gets nothing back")
	_, err = h.lim.Take(ctx, "k", 3)
	require.NoError(t, err)
	require.NoError(t, h.lim.Refund(ctx, "k", 2, took))
	assert.Equal(t, []int64{7}, remaining(t, h.lim, "k"), "yesterday's take gives nothing back of today's")
}

// look returns key's result under lim's only policy, without spending.
func look(t *testing.T, lim *ratelimit.Limiter, key string) ratelimit.Result {
	t.Helper()
	res, err := lim.Take(context.Background(), key, 0)
	require.NoError(t, err)
	return res
}

// A charge takes past empty: the key's next request waits exactly until
// the debt is repaid and its own token earned, and not a nanosecond less.
func TestChargePastEmpty(t *testing.T) {
	ctx := context.Background()
	h := newEngine(t, setup{limit: ratelimit.Per(10, 10*time.Second)}) // a token a second, τ = 10 s
	took, err := h.lim.Take(ctx, "k", 10)
	require.NoError(t, err)
	require.True(t, took.Allowed)
	require.NoError(t, h.lim.Settle(ctx, "k", "requests", 10, 15, took))
	res := look(t, h.lim, "k")
	assert.Equal(t, int64(0), res.Remaining)
	assert.Equal(t, 15*time.Second, res.ResetAfter, "10 s of burst and 5 s of debt")

	waitExactly(t, h, "k", 1, 6*time.Second) // 5 s of debt and 1 s for the token
}

// waitExactly checks that key's request of cost is refused with a wait of
// exactly wait, and still a nanosecond before its end, and allowed at it;
// it leaves h's clock there and returns the allowed Result.
func waitExactly(t *testing.T, h *engine, key string, cost int64, wait time.Duration) ratelimit.Result {
	t.Helper()
	ctx := context.Background()
	res, err := h.lim.Take(ctx, key, cost)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "Take(%q, %d)", key, cost)
	assert.Equal(t, wait, res.RetryAfter, "Take(%q, %d).RetryAfter", key, cost)
	h.clock.Advance(wait - 1)
	res, err = h.lim.Take(ctx, key, cost)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "Take(%q, %d) a nanosecond early", key, cost)
	assert.Equal(t, time.Duration(1), res.RetryAfter, "Take(%q, %d) a nanosecond early", key, cost)
	h.clock.Advance(1)
	res, err = h.lim.Take(ctx, key, cost)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "Take(%q, %d) at the end of the wait", key, cost)
	return res
}

// A charge is exact: the key waits what it spent, however much, and
// RetryAfter says so; a charge so large that it saturates is the farthest
// debt, never nothing.
func TestChargeExact(t *testing.T) {
	ctx := context.Background()
	h := newEngine(t, setup{limit: ratelimit.Per(10, 10*time.Second)}) // a token a second
	took, err := h.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	require.NoError(t, h.lim.Settle(ctx, "k", "requests", 1, 101, took))
	assert.Equal(t, 101*time.Second, look(t, h.lim, "k").ResetAfter, "after a cost of 101")
	res, err := h.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, 92*time.Second, res.RetryAfter, "the debt repaid, and one token")
	h.clock.Advance(92*time.Second - 1)
	res, err = h.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "1 ns before the debt is repaid")
	h.clock.Advance(1)
	res, err = h.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "once the debt is repaid")

	for _, cost := range []int64{math.MaxInt64 - 1, 1 << 62, math.MaxInt64} {
		key := fmt.Sprintf("k%d", cost)
		took, err := h.lim.Take(ctx, key, 1)
		require.NoError(t, err)
		require.NoError(t, h.lim.Settle(ctx, key, "requests", 1, cost, took))
		res, err := h.lim.Take(ctx, key, 1)
		require.NoError(t, err)
		assert.False(t, res.Allowed, "after a cost of %d", cost)
		assert.Greater(t, res.RetryAfter, 200*365*24*time.Hour, "after a cost of %d: the saturated debt", cost)
	}
}

// A calendar quota's debt is refused until the reset, when it ends: the
// key finds its whole quota then.
func TestChargeQuota(t *testing.T) {
	ctx := context.Background()
	h := newEngine(t, setup{limit: ratelimit.Daily(10, time.UTC)})
	took, err := h.lim.Take(ctx, "k", 4)
	require.NoError(t, err)
	require.NoError(t, h.lim.Settle(ctx, "k", "requests", 4, 7, took))
	assert.Equal(t, int64(3), look(t, h.lim, "k").Remaining, "7 spent")
	require.NoError(t, h.lim.Settle(ctx, "k", "requests", 4, 104, took))
	assert.Equal(t, int64(0), look(t, h.lim, "k").Remaining)
	res, err := h.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.Equal(t, untilMidnight, res.RetryAfter)

	h.clock.Advance(untilMidnight - 1)
	res, err = h.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.Equal(t, time.Duration(1), res.RetryAfter)
	h.clock.Advance(1)
	assert.Equal(t, int64(10), look(t, h.lim, "k").Remaining, "the debt ended at midnight")
}

// A charge (Settle above what was reserved) charges every policy whose
// result allowed the request, dry-run and Global ones included, and none
// that refused it.
func TestChargePolicies(t *testing.T) {
	ctx := context.Background()
	h := newEngine(t, setup{policies: []ratelimit.Policy{
		{Name: "burst", Limit: ratelimit.PerSecond(1).WithBurst(10)},
		{Name: "hourly", Limit: ratelimit.Per(100, time.Hour)},
		{Name: "shadow", Limit: ratelimit.Per(20, time.Hour), DryRun: true},
		{Name: "tight", Limit: ratelimit.Per(4, time.Hour), DryRun: true},
		{Name: "global", Limit: ratelimit.Per(1000, time.Hour), Global: true},
		{Name: "daily", Limit: ratelimit.Daily(50, time.UTC)},
	}})
	took, err := h.lim.Take(ctx, "k", 5)
	require.NoError(t, err)
	require.True(t, took.Allowed)
	require.Equal(t, []string{"tight"}, refusers.Names(took, true))
	require.NoError(t, h.lim.Settle(ctx, "k", "requests", 5, 8, took))
	assert.Equal(t, []int64{2, 92, 12, 4, 992, 42}, remaining(t, h.lim, "k"))
	assert.Equal(t, int64(992), look(t, h.lim, "other").Results[4].Remaining, "the global bucket is every key's")
}

// Settle charges nothing for a refused Result or a cost at most what was
// reserved, and refuses an empty key and a Result of another Limiter; a
// store's failure to charge is ErrStore.
func TestSettleChargesNothingAndErrors(t *testing.T) {
	ctx := context.Background()
	p := ratelimit.Policy{Name: "api", Limit: ratelimit.Per(3, time.Hour)}
	h := newEngine(t, setup{policies: []ratelimit.Policy{p}})
	took, err := h.lim.Take(ctx, "k", 2)
	require.NoError(t, err)
	refused, err := h.lim.Take(ctx, "k", 2)
	require.NoError(t, err)
	require.False(t, refused.Allowed)
	for _, tc := range []struct {
		cost int64
		took ratelimit.Result
		what string
	}{{7, refused, "a refusal"}, {2, took, "the cost reserved"}} {
		require.NoError(t, h.lim.Settle(ctx, "k", "requests", 2, tc.cost, tc.took), "Settle of %s", tc.what)
		assert.Equal(t, 40*time.Minute, look(t, h.lim, "k").ResetAfter, "Settle of %s charges nothing", tc.what)
	}

	err = h.lim.Settle(ctx, "", "requests", 2, 3, took)
	assert.ErrorIs(t, err, ratelimit.ErrMissingKey)
	other, err := ratelimit.New(h.store, p)
	require.NoError(t, err)
	assert.EqualError(t, other.Settle(ctx, "k", "requests", 2, 3, took), `ratelimit: Settle: the Result is not of this Limiter's Take (its policy: "api")`)
	assert.ErrorContains(t, h.lim.Settle(ctx, "k", "requests", 2, 3, ratelimit.Result{Allowed: true}), "(its policy: none)")
	assert.Equal(t, 40*time.Minute, look(t, h.lim, "k").ResetAfter, "nothing charged")

	failing := newEngine(t, setup{policies: []ratelimit.Policy{p}, wrap: func(s ratelimit.Store) ratelimit.Store { return debtFails{s} }})
	took, err = failing.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	err = failing.lim.Settle(ctx, "k", "requests", 1, 2, took)
	assert.ErrorIs(t, err, ratelimit.ErrStore)
	assert.ErrorContains(t, err, "connection reset")
}

// debtFails is a store whose charges (the takes of a debt) fail.
type debtFails struct{ ratelimit.Store }

func (s debtFails) Take(ctx context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	if p.Algorithm == algo.Debt {
		return ratelimit.Result{}, errors.New("connection reset")
	}
	return s.Store.Take(ctx, p, key, cost)
}

// settleModel is a model of one key's token bucket in whole nanoseconds,
// written from the rules rather than from the code: F is the time the
// bucket needs to be full again; a take of r > 0 is allowed iff F + r ×
// interval ≤ τ and adds r × interval; a refund takes back at most what is
// left to earn; a charge adds its cost exactly. A calendar quota is the
// same bucket of 1 ns a token, whose time runs only at its period's end
// (vnow), and whose debt stops at 2τ (it ends at the reset).
type settleModel struct {
	interval, burst int64
	quota           bool
	vnow            func(now int64) int64
	state           int64 // the instant the bucket is full again, in vnow's time
}

// full returns F at now, and τ.
func (m *settleModel) full(now int64) (f, tau int64) {
	return max(m.state-m.vnow(now), 0), m.burst * m.interval
}

func (m *settleModel) take(now, cost int64) (allowed bool, remaining, retry, reset int64) {
	f, tau := m.full(now)
	if cost == 0 {
		return true, min(max((tau-f)/m.interval, 0), m.burst), 0, f // a look
	}
	if allowed = f+cost*m.interval <= tau; allowed {
		f += cost * m.interval
		m.state = m.vnow(now) + f
	} else {
		retry = f + cost*m.interval - tau
	}
	return allowed, min(max((tau-f)/m.interval, 0), m.burst), retry, f
}

func (m *settleModel) refund(now, cost int64) {
	f, _ := m.full(now)
	m.state -= min(cost*m.interval, f)
}

func (m *settleModel) charge(now, cost int64) {
	f, tau := m.full(now)
	debt := f + cost*m.interval
	if m.quota {
		debt = min(debt, 2*tau)
	}
	m.state = max(m.state, m.vnow(now)+debt)
}

// TestSettleMatchesModel replays random requests, each reserving r tokens
// and settling s once answered (Refund of r − s, or Charge of s − r), at
// random times on the fake clock, sometimes settled later, through a
// Limiter on the memory store, and compares every decision, and the bucket
// after every settlement, with settleModel; for rates and a daily quota.
func TestSettleMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	ctx := context.Background()
	differences, decisions := 0, 0
	for trace := range 300 {
		burst := 1 + rng.Int64N(12)
		m := &settleModel{interval: 1 + rng.Int64N(int64(time.Second)), burst: burst, vnow: func(now int64) int64 { return now }}
		p := ratelimit.Policy{Name: "p", Limit: ratelimit.Per(1, time.Duration(m.interval)).WithBurst(burst)}
		step := func() time.Duration { return time.Duration(rng.Int64N(3 * m.interval)) }
		quota := trace%4 == 3
		if quota {
			p.Limit = ratelimit.Daily(burst, time.UTC)
			m.interval, m.quota = 1, true
			m.vnow = func(now int64) int64 { _, end := p.Limit.Period(time.Unix(0, now)); return end.UnixNano() }
			step = func() time.Duration { return time.Duration(rng.Int64N(int64(6 * time.Hour))) }
		}
		h := newEngine(t, setup{policies: []ratelimit.Policy{p}})
		check := func(what string, res ratelimit.Result, allowed bool, remaining, retry, reset int64) {
			t.Helper()
			decisions++
			now := h.clock.Now().UnixNano()
			if quota { // a quota's waits run to its period's end
				if reset = m.vnow(now) - now; retry != 0 {
					retry = reset
				}
			}
			got := [4]int64{b2i(res.Allowed), res.Remaining, int64(res.RetryAfter), int64(res.ResetAfter)}
			if want := [4]int64{b2i(allowed), remaining, retry, reset}; got != want {
				if differences++; differences <= 5 {
					t.Errorf("trace %d: %v: %s: [allowed remaining retry reset] = %v, model says %v", trace, p.Limit, what, got, want)
				}
			}
		}
		for range 100 {
			h.clock.Advance(step())
			r := 1 + rng.Int64N(burst)
			took, err := h.lim.Take(ctx, "k", r)
			require.NoError(t, err)
			allowed, remaining, retry, reset := m.take(h.clock.Now().UnixNano(), r)
			check(fmt.Sprintf("Take(%d)", r), took, allowed, remaining, retry, reset)
			if !took.Allowed {
				continue
			}
			if rng.IntN(3) == 0 {
				h.clock.Advance(step()) // answered later
			}
			s := rng.Int64N(3*burst + 1)
			now := h.clock.Now().UnixNano()
			switch {
			case s < r:
				require.NoError(t, h.lim.Refund(ctx, "k", r-s, took))
				m.refund(now, r-s)
			case s > r:
				require.NoError(t, h.lim.Settle(ctx, "k", "requests", r, s, took))
				m.charge(now, s-r)
			}
			allowed, remaining, retry, reset = m.take(now, 0)
			check(fmt.Sprintf("after Take(%d) settled at %d", r, s), look(t, h.lim, "k"), allowed, remaining, retry, reset)
		}
	}
	assert.Zero(t, differences, "differences in %d decisions", decisions)
}

// TestSettleStillClock: with the clock held still, each admitted request
// moves its bucket by exactly its settled cost × interval (the key is
// charged exactly the sum of its settled costs, debt included); a request is admitted only if the bucket holds what it reserves
// after the costs settled before it, so the tokens settled exceed the burst
// only by the last admitted request, the one that goes into debt; after it
// nothing is admitted.
func TestSettleStillClock(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	ctx := context.Background()
	for range 300 {
		burst := 1 + rng.Int64N(20)
		iv := 1 + rng.Int64N(int64(time.Second))
		h := newEngine(t, setup{limit: ratelimit.Per(1, time.Duration(iv)).WithBurst(burst)})
		var settled int64 // the sum of the settled costs of the admitted requests
		inDebt := false
		for i := range 50 {
			r := 1 + rng.Int64N(burst)
			took, err := h.lim.Take(ctx, "k", r)
			require.NoError(t, err)
			require.Equal(t, !inDebt && settled+r <= burst, took.Allowed, "request %d: Take(%d) with %d of %d settled", i, r, settled, burst)
			if !took.Allowed {
				continue
			}
			s := rng.Int64N(2*burst + 1)
			if s < r {
				require.NoError(t, h.lim.Refund(ctx, "k", r-s, took))
			} else {
				require.NoError(t, h.lim.Settle(ctx, "k", "requests", r, s, took))
			}
			settled += s
			inDebt = settled > burst
			assert.Equal(t, time.Duration(settled*iv), look(t, h.lim, "k").ResetAfter,
				"request %d: the bucket after settling %d (%d in all) of a burst of %d", i, s, settled, burst)
		}
	}
}

// benchTake measures Limiter.Take of one key, all allowed, on the memory
// store, for a Limiter of p.
func benchTake(b *testing.B, p ratelimit.Policy, key string) {
	store, err := memorystore.New(nil)
	require.NoError(b, err)
	lim, err := ratelimit.New(store, p)
	require.NoError(b, err)
	ctx := context.Background()
	b.ReportAllocs()
	allowed := 0
	for b.Loop() {
		if res, _ := lim.Take(ctx, key, 1); res.Allowed {
			allowed++
		}
	}
	if allowed != b.N {
		b.Fatalf("allowed %d of %d", allowed, b.N)
	}
}

// benchLimit allows every request of a benchmark.
var benchLimit = ratelimit.Per(1_000_000, time.Second).WithBurst(1e12)

// BenchmarkTake is one decision of a Limiter of one policy.
func BenchmarkTake(b *testing.B) {
	benchTake(b, ratelimit.Policy{Name: "api", Limit: benchLimit}, "ak:one")
}

// BenchmarkTakeLimitFor is BenchmarkTake with Policy.LimitFor, a lookup in
// a map: for a key of its own limit, and one that has Policy.Limit.
func BenchmarkTakeLimitFor(b *testing.B) {
	plans := map[string]ratelimit.Limit{"ak:gold": benchLimit.WithBurst(2e12)}
	p := ratelimit.Policy{Name: "api", Limit: benchLimit, LimitFor: func(key string) (ratelimit.Limit, bool) {
		l, ok := plans[key]
		return l, ok
	}}
	b.Run("own-limit", func(b *testing.B) { benchTake(b, p, "ak:gold") })
	b.Run("policy-limit", func(b *testing.B) { benchTake(b, p, "ak:one") })
}

// Refund and Settle of one policy's result, of a Limiter of several, are
// errors naming the cause: they would otherwise do nothing.
func TestSettleOnePolicysResult(t *testing.T) {
	ctx := context.Background()
	h := newEngine(t, setup{policies: []ratelimit.Policy{
		{Name: "a", Limit: ratelimit.PerSecond(5)}, {Name: "b", Limit: ratelimit.PerSecond(50)},
	}})
	res, err := h.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	const want = `ratelimit: %s: the Result is policy "a"'s alone; pass the Result Take returned, which holds each of the 2 policies'`
	assert.EqualError(t, h.lim.Settle(ctx, "k", "requests", 1, 1001, res.Results[0]), fmt.Sprintf(want, "Settle"))
	assert.EqualError(t, h.lim.Refund(ctx, "k", 1, res.Results[0]), fmt.Sprintf(want, "Refund"))
	require.NoError(t, h.lim.Settle(ctx, "k", "requests", 1, 1001, res))
	res, err = h.lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "the whole Result: charged")
}
