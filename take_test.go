package ratelimit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/refusers"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/storetest"
)

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

// TakeUnits spends each policy's cost in its unit, all or nothing; a unit
// without a cost spends 1.
func TestTakeUnits(t *testing.T) {
	ctx := context.Background()
	lim := meters(t)
	res, err := lim.TakeUnits(ctx, "k", map[string]int64{"tokens": 60})
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, []int64{9, 40, 999}, remaining(t, lim, "k"))

	res, err = lim.TakeUnits(ctx, "k", map[string]int64{"tokens": 41, "content-bytes": 5})
	require.NoError(t, err)
	assert.False(t, res.Allowed, "41 tokens of 40")
	assert.Equal(t, "tokens", res.Policy.Name)
	assert.Equal(t, []int64{9, 40, 999}, remaining(t, lim, "k"), "refused by one unit: nothing spent in any")

	_, err = lim.TakeUnits(ctx, "k", map[string]int64{"credits": 1})
	assert.EqualError(t, err, `ratelimit: TakeUnits: no policy counts the unit "credits" (the units: ["requests" "tokens" "content-bytes"])`)
	_, err = lim.TakeUnits(ctx, "k", map[string]int64{"tokens": -1})
	assert.ErrorIs(t, err, ratelimit.ErrBadRequest)
	_, err = lim.TakeUnits(ctx, "k", map[string]int64{"tokens": 101})
	assert.ErrorIs(t, err, ratelimit.ErrBadRequest, "above the burst of tokens")
	assert.Equal(t, []int64{9, 40, 999}, remaining(t, lim, "k"))
}

// On a store that cannot decide the policies together (a Redis Cluster
// with a global policy), a refusal by one unit gives back what each other
// policy took, in its own unit: nothing is spent in any.
func TestTakeUnitsOneAtATime(t *testing.T) {
	ctx := context.Background()
	store, err := memorystore.New(&memorystore.Options{Clock: new(storetest.Clock).Now})
	require.NoError(t, err)
	na := &notAtomicStore{Store: store}
	lim, err := ratelimit.New(na,
		ratelimit.Policy{Name: "calls", Limit: ratelimit.Per(10, time.Minute)},
		ratelimit.Policy{Name: "bytes", Limit: ratelimit.Per(1000, time.Minute), Unit: "content-bytes"},
		ratelimit.Policy{Name: "tokens", Limit: ratelimit.Per(100, time.Minute), Unit: "tokens"})
	require.NoError(t, err)
	res, err := lim.TakeUnits(ctx, "k", map[string]int64{"content-bytes": 400, "tokens": 60})
	require.NoError(t, err)
	require.True(t, res.Allowed)
	res, err = lim.TakeUnits(ctx, "k", map[string]int64{"requests": 3, "content-bytes": 500, "tokens": 41})
	require.NoError(t, err)
	assert.False(t, res.Allowed, "41 tokens of 40")
	assert.Equal(t, []int64{9, 600, 40}, remaining(t, lim, "k"), "the 3 requests and 500 bytes taken before the refusal went back")
	assert.Positive(t, na.batches.Load(), "TakeAll was asked, and said errors.ErrUnsupported")
}

// BenchmarkTakeUnits is one decision of three policies: of one unit (Take,
// the same cost to each), and of three (TakeUnits, a cost for each).
func BenchmarkTakeUnits(b *testing.B) {
	store, err := memorystore.New(nil)
	require.NoError(b, err)
	ctx := context.Background()
	run := func(b *testing.B, units [3]string, take func(*ratelimit.Limiter) (ratelimit.Result, error)) {
		lim, err := ratelimit.New(store,
			ratelimit.Policy{Name: "a" + units[0], Limit: benchLimit, Unit: units[0]},
			ratelimit.Policy{Name: "b" + units[1], Limit: benchLimit, Unit: units[1]},
			ratelimit.Policy{Name: "c" + units[2], Limit: benchLimit, Unit: units[2]})
		require.NoError(b, err)
		b.ReportAllocs()
		allowed := 0
		for b.Loop() {
			if res, _ := take(lim); res.Allowed {
				allowed++
			}
		}
		if allowed != b.N {
			b.Fatalf("allowed %d of %d", allowed, b.N)
		}
	}
	b.Run("one-unit", func(b *testing.B) {
		run(b, [3]string{"requests", "requests", "requests"}, func(l *ratelimit.Limiter) (ratelimit.Result, error) { return l.Take(ctx, "k", 1) })
	})
	b.Run("three-units", func(b *testing.B) {
		run(b, [3]string{"requests", "tokens", "content-bytes"}, func(l *ratelimit.Limiter) (ratelimit.Result, error) {
			return l.TakeUnits(ctx, "k", map[string]int64{"tokens": 700, "content-bytes": 1})
		})
	})
}
