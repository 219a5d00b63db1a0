// Package storetest is a conformance suite for implementations of
// [ratelimit.Store]. Every store in this project passes it, and so should
// yours:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
//			s, err := mystore.New(&mystore.Options{Clock: now})
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// The suite drives time through the clock it hands to the factory, so the
// store must read time only from it. It checks exact decisions (refill to
// the nanosecond, costs, refusals that spend nothing), that keys and
// policies are independent (keys that differ only in case, in spaces or
// after their 255th byte included), and that concurrent requests on one
// key admit exactly the burst. For a [ratelimit.ResetStore] it checks that Reset
// forgets one bucket exactly, and no other; for other stores those tests
// are skipped.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"github.com/tokenfair/ratelimit/internal/algo"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

// NewStore returns a fresh, empty store that reads time from now. It may
// register cleanups with t.
type NewStore func(t *testing.T, now func() time.Time) ratelimit.Store

// Clock is a fake clock safe for concurrent use. Its zero value reads
// 2026-01-01T00:00:00Z.
type Clock struct{ ns atomic.Int64 }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return epoch.Add(time.Duration(c.ns.Load())) }

// Advance moves the clock by d, which may be negative.
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Run runs the conformance suite against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	t.Helper()
	runTests(t, newStore, []test{
		{"NewKeyStartsFull", testNewKeyStartsFull},
		{"RefillToTheNanosecond", testRefill},
		{"WorkedExample", testWorkedExample},
		{"Exercise", testExercise},
		{"Cost", testCost},
		{"RefusalSpendsNothing", testRefusalSpendsNothing},
		{"GiveBack", testGiveBack},
		{"GiveBackModel", testGiveBackModel},
		{"KeysAndPoliciesIndependent", testIndependent},
		{"FullBucketForgotten", testFullBucketForgotten},
		{"ClockBackwards", testClockBackwards},
		{"LongLimits", testLongLimits},
		{"ConcurrentOneKey", testConcurrentOneKey},
		{"ConcurrentManyKeys", testConcurrentManyKeys},
		{"LeakyPoliceLikeTokenBucket", testLeakyPolice},
		{"ShapeSchedule", testShapeSchedule},
		{"ShapeQueueEdge", testShapeEdge},
		{"ShapeCostsAndIdle", testShapeCosts},
		{"ShapeImmediate", testShapeImmediate},
		{"ShapeMaxDelay", testShapeMaxDelay},
		{"ShapeConcurrent", testShapeConcurrent},
		{"PoliciesGlobalCapacity", testGlobalCapacity},
		{"PoliciesRefusalSpendsNothingElsewhere", testRefusedByGlobal},
		{"PoliciesMultiWindow", testMultiWindow},
		{"PoliciesDryRun", testDryRun},
		{"PoliciesConcurrent", testPoliciesConcurrent},
		{"BatchRefusedSpendsAtNoMoment", testBatchNoMoment},
		{"Reset", testReset},
		{"ResetConcurrent", testResetConcurrent},
		{"PoliciesReset", testPoliciesReset},
		{"Ban", testBan},
		{"PenaltyBans", testPenaltyBans},
		{"PenaltyStrikesAge", testPenaltyStrikesAge},
		{"PenaltyBackOff", testPenaltyBackOff},
		{"PenaltyBurstBansFor", testPenaltyBurstBansFor},
		{"PenaltyBurstBackOff", testPenaltyBurstBackOff},
		{"PenaltyReset", testPenaltyReset},
	})
}

// test is one test of the suite.
type test struct {
	name string
	fn   func(*testing.T, *Clock, ratelimit.Store)
}

// runTests runs each of tests on a store of its own, with a clock of its
// own.
func runTests(t *testing.T, newStore NewStore, tests []test) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := new(Clock)
			tc.fn(t, c, newStore(t, c.Now))
		})
	}
}

func policy(name string, l ratelimit.Limit) *ratelimit.Policy {
	return &ratelimit.Policy{Name: name, Limit: l}
}

func shape(name string, l ratelimit.Limit) *ratelimit.Policy {
	return &ratelimit.Policy{Name: name, Limit: l, Algorithm: ratelimit.LeakyShape}
}

type step struct {
	advance time.Duration
	key     string
	cost    int64
	want    ratelimit.Result // Policy is filled in by run
}

func take(t *testing.T, s ratelimit.Store, p *ratelimit.Policy, key string, cost int64) ratelimit.Result {
	t.Helper()
	before := *p
	res, err := s.Take(context.Background(), p, key, cost)
	require.NoError(t, err, "Take(%q, %q, %d)", p.Name, key, cost)
	require.Equal(t, before, *p, "Take(%q, %q, %d) modified the policy", p.Name, key, cost)
	return res
}

func run(t *testing.T, c *Clock, s ratelimit.Store, p *ratelimit.Policy, steps []step) {
	t.Helper()
	for i, st := range steps {
		c.Advance(st.advance)
		key := st.key
		if key == "" {
			key = "k"
		}
		st.want.Policy = p
		got := take(t, s, p, key, st.cost)
		got.Until = 0 // the store's own, for its Refund (testGiveBack)
		assert.Equal(t, st.want, got, "step %d: Take(%q, %q, %d) after %v", i, p.Name, key, st.cost, st.advance)
	}
}

func allowed(remaining int64, resetAfter time.Duration) ratelimit.Result {
	return ratelimit.Result{Allowed: true, Remaining: remaining, ResetAfter: resetAfter}
}

func refused(remaining int64, retryAfter, resetAfter time.Duration) ratelimit.Result {
	return ratelimit.Result{Remaining: remaining, RetryAfter: retryAfter, ResetAfter: resetAfter}
}

const ms = time.Millisecond

// 5 per second, burst 10: one token every 200 ms.
var fivePerSecond = ratelimit.PerSecond(5).WithBurst(10)

func testNewKeyStartsFull(t *testing.T, c *Clock, s ratelimit.Store) {
	var steps []step
	for i := int64(1); i <= 10; i++ {
		steps = append(steps, step{cost: 1, want: allowed(10-i, time.Duration(i)*200*ms)})
	}
	steps = append(steps, step{cost: 1, want: refused(0, 200*ms, 2*time.Second)})
	run(t, c, s, policy("p", fivePerSecond), steps)
}

func testRefill(t *testing.T, c *Clock, s ratelimit.Store) {
	p := policy("p", fivePerSecond)
	run(t, c, s, p, []step{
		{cost: 10, want: allowed(0, 2*time.Second)},
		{advance: 200*ms - 1, cost: 1, want: refused(0, 1, 2*time.Second-200*ms+1)},
		{advance: 1, cost: 1, want: allowed(0, 2*time.Second)},
		{advance: 400*ms - 1, cost: 2, want: refused(1, 1, 1600*ms+1)},
		{advance: 1, cost: 2, want: allowed(0, 2*time.Second)},
	})
}

// testWorkedExample is the seed's example: 5 per second, capacity 10, twelve
// requests at once: ten pass, two are refused with 200 ms to wait
// (Retry-After: 1); one second later five more pass.
func testWorkedExample(t *testing.T, c *Clock, s ratelimit.Store) {
	p := policy("p", fivePerSecond)
	var admitted, refusedN int
	for range 12 {
		res := take(t, s, p, "client", 1)
		if res.Allowed {
			admitted++
		} else {
			refusedN++
			assert.Equal(t, 200*ms, res.RetryAfter)
		}
	}
	assert.Equal(t, 10, admitted)
	assert.Equal(t, 2, refusedN)
	c.Advance(time.Second)
	admitted = 0
	for range 6 {
		if take(t, s, p, "client", 1).Allowed {
			admitted++
		}
	}
	assert.Equal(t, 5, admitted, "one second later")
}

// testExercise: refill 2 per second, capacity 5, starting empty at T=0 (the
// bucket is drained at T=0); ten requests at T=3 s: the bucket has refilled
// to its capacity, five pass and five are refused.
func testExercise(t *testing.T, c *Clock, s ratelimit.Store) {
	p := policy("p", ratelimit.PerSecond(2).WithBurst(5))
	require.True(t, take(t, s, p, "k", 5).Allowed, "drain at T=0")
	c.Advance(3 * time.Second)
	var got []bool
	for range 10 {
		got = append(got, take(t, s, p, "k", 1).Allowed)
	}
	assert.Equal(t, []bool{true, true, true, true, true, false, false, false, false, false}, got)
}

func testCost(t *testing.T, c *Clock, s ratelimit.Store) {
	run(t, c, s, policy("p", fivePerSecond), []step{
		{cost: 0, want: allowed(10, 0)},
		{cost: 3, want: allowed(7, 600*ms)},
		{cost: 0, want: allowed(7, 600*ms)},
		{cost: 8, want: refused(7, 200*ms, 600*ms)},
		{cost: 7, want: allowed(0, 2*time.Second)},
		{cost: 0, want: allowed(0, 2*time.Second)},
		{advance: 2 * time.Second, cost: 10, want: allowed(0, 2*time.Second)},
	})
}

func testRefusalSpendsNothing(t *testing.T, c *Clock, s ratelimit.Store) {
	p := policy("p", fivePerSecond)
	take(t, s, p, "k", 10)
	for range 100 {
		require.False(t, take(t, s, p, "k", 1).Allowed)
	}
	c.Advance(200 * ms)
	assert.True(t, take(t, s, p, "k", 1).Allowed, "the first token earned after refusals")
}

// testGiveBack: a refund gives back exactly what the take still costs the
// bucket: all of it at once, what is left of it later, nothing once the
// bucket has been full since, and nothing of a take made before a reset.
// Open requests that do not count (Options.CountIf) can therefore never
// bank tokens beyond the burst.
func testGiveBack(t *testing.T, c *Clock, s ratelimit.Store) {
	rs, ok := s.(ratelimit.RefundStore)
	if !ok {
		t.Skip("the store does not implement ratelimit.RefundStore")
	}
	p := policy("p", fivePerSecond)
	refund := func(key string, cost int64, took ratelimit.Result) {
		t.Helper()
		require.NoError(t, rs.Refund(context.Background(), p, key, cost, took), "Refund(%q, %d)", key, cost)
	}
	remaining := func(key string) int64 { t.Helper(); return take(t, s, p, key, 0).Remaining }

	// At once: the bucket is as if the take had not happened.
	six := take(t, s, p, "k", 6)
	refund("k", 6, six)
	assert.EqualValues(t, 10, remaining("k"), "an immediate refund gives everything back")
	// Later: only what the bucket has not earned back since.
	six = take(t, s, p, "k", 6) // full again at +1.2 s
	c.Advance(400 * ms)
	refund("k", 6, six)
	assert.EqualValues(t, 10, remaining("k"))
	two := take(t, s, p, "k", 2)   // state +400 ms
	eight := take(t, s, p, "k", 8) // state +2 s
	c.Advance(300 * ms)            // the two are due back at +400 ms: 100 ms of them is owed
	refund("k", 2, two)
	res := take(t, s, p, "k", 0)
	assert.Equal(t, 1600*ms, res.ResetAfter, "a refund credits until − now, not the whole cost")
	c.Advance(2 * time.Second) // full
	refund("k", 8, eight)
	assert.EqualValues(t, 10, remaining("k"), "nothing beyond full")

	// Banking: five open requests, the bucket refills, five more spend it,
	// then the open ones are given back: nothing comes back.
	var open []ratelimit.Result
	for range 5 {
		open = append(open, take(t, s, p, "b", 1))
	}
	c.Advance(2 * time.Second) // full again
	for range 10 {
		require.True(t, take(t, s, p, "b", 1).Allowed)
	}
	for _, r := range open {
		refund("b", 1, r)
	}
	assert.False(t, take(t, s, p, "b", 1).Allowed, "refunds of takes the bucket has earned back since bank nothing")

	// A reset between the take and the refund: the bucket the tokens came
	// from was forgotten, so nothing comes back.
	if rst, ok := s.(ratelimit.ResetStore); ok {
		took := take(t, s, p, "r", 5)
		require.NoError(t, rst.Reset(context.Background(), p, "r"))
		require.True(t, take(t, s, p, "r", 10).Allowed)
		refund("r", 5, took)
		assert.False(t, take(t, s, p, "r", 1).Allowed, "a refund after a reset banks nothing")
		c.Advance(2 * time.Second)
		require.NoError(t, rst.Reset(context.Background(), p, "r"))
		c.Advance(1) // a take at the reset's instant may have been before it: it gets nothing back
		took = take(t, s, p, "r", 4)
		refund("r", 4, took)
		assert.EqualValues(t, 10, remaining("r"), "a take after the reset is given back")
	}
}

// testIndependent: every key, and every policy, has a bucket of its own,
// whatever bytes they hold: keys that differ only in case, in trailing or
// leading spaces, after their 255th byte, or in where the policy name
// ends and the key begins never share a bucket (as a store keyed by a
// case-insensitive, space-padding or length-limited column, or by the two
// names joined, would make them).
func testIndependent(t *testing.T, c *Clock, s ratelimit.Store) {
	a, b := policy("a", fivePerSecond), policy("b", fivePerSecond)
	long := strings.Repeat("x", 255)
	keys := []string{"k", "K", "k ", " k", "k:1", "k:", ":k", "1:k", "ключ", "КЛЮЧ", "k\x00", "\x00", "🙂",
		string(make([]byte, 1000)), long + "1", long + "2", "bk"}
	for _, k := range keys {
		res := take(t, s, a, k, 10)
		assert.True(t, res.Allowed, "drain %q: its bucket was full (no other key's)", k)
		assert.Equal(t, int64(0), res.Remaining, "drain %q", k)
	}
	for _, k := range keys {
		assert.False(t, take(t, s, a, k, 1).Allowed, "policy a, key %q drained", k)
		assert.Equal(t, int64(9), take(t, s, b, k, 1).Remaining, "policy b, key %q untouched", k)
	}
	ab := policy("ab", fivePerSecond)
	assert.Equal(t, int64(9), take(t, s, ab, "k", 1).Remaining, `policy "ab", key "k" is not policy "a", key "bk"`)
}

func testFullBucketForgotten(t *testing.T, c *Clock, s ratelimit.Store) {
	p := policy("p", fivePerSecond)
	take(t, s, p, "k", 10)
	c.Advance(2 * time.Second)
	run(t, c, s, p, []step{
		{cost: 0, want: allowed(10, 0)},
		{advance: time.Hour, cost: 10, want: allowed(0, 2*time.Second)},
	})
}

func testClockBackwards(t *testing.T, c *Clock, s ratelimit.Store) {
	p := policy("p", fivePerSecond)
	c.Advance(time.Hour)
	take(t, s, p, "k", 10)
	c.Advance(-time.Minute)
	res := take(t, s, p, "k", 1)
	assert.False(t, res.Allowed, "a clock that went back grants nothing")
	assert.Equal(t, int64(0), res.Remaining)
	c.Advance(time.Minute + 200*ms)
	assert.True(t, take(t, s, p, "k", 1).Allowed)
	assert.False(t, take(t, s, p, "k", 1).Allowed)
}

func testLongLimits(t *testing.T, c *Clock, s ratelimit.Store) {
	day := policy("day", ratelimit.Per(10000, 24*time.Hour))
	run(t, c, s, day, []step{
		{cost: 10000, want: allowed(0, 24*time.Hour)},
		{cost: 1, want: refused(0, 8640*ms, 24*time.Hour)},
		{advance: 8640*ms - 1, cost: 1, want: refused(0, 1, 24*time.Hour-8640*ms+1)},
		{advance: 1, cost: 1, want: allowed(0, 24*time.Hour)},
	})
	seven := policy("seven", ratelimit.Per(1, 7*time.Second))
	run(t, c, s, seven, []step{
		{cost: 1, want: allowed(0, 7*time.Second)},
		{advance: 3 * time.Second, cost: 1, want: refused(0, 4*time.Second, 4*time.Second)},
	})
}

func testConcurrentOneKey(t *testing.T, c *Clock, s ratelimit.Store) {
	concurrentOneKey(t, s, policy("p", ratelimit.PerSecond(1).WithBurst(1000)), 1000)
}

func testShapeConcurrent(t *testing.T, c *Clock, s ratelimit.Store) {
	// One request runs at once and a full queue waits behind it.
	concurrentOneKey(t, s, shape("p", ratelimit.PerSecond(1).WithBurst(1000)), 1001)
}

// concurrentOneKey: in each of several rounds, goroutines released at
// once race for a fresh key; exactly want requests are admitted. A store
// whose read and write of a bucket are not one atomic step admits more in
// some round.
func concurrentOneKey(t *testing.T, s ratelimit.Store, p *ratelimit.Policy, want int64) {
	const rounds, goroutines, each = 4, 8, 150
	for round := range rounds {
		key := fmt.Sprint("hot-", round)
		var admitted atomic.Int64
		race(t, goroutines, func(int) error {
			for range each {
				res, err := s.Take(context.Background(), p, key, 1)
				if err != nil {
					return fmt.Errorf("Take(%q): %w", key, err)
				}
				if res.Allowed {
					admitted.Add(1)
				}
			}
			return nil
		})
		require.Equal(t, want, admitted.Load(), "round %d: %d goroutines × %d requests on one key: %v", round, goroutines, each, p.Limit)
	}
}

// race runs f(0), …, f(n−1) in goroutines released at once, waits for
// them all, and fails the test with the first error one returned.
func race(t *testing.T, n int, f func(g int) error) {
	t.Helper()
	var first atomic.Pointer[error]
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := f(g); err != nil {
				first.CompareAndSwap(nil, &err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if err := first.Load(); err != nil {
		require.NoError(t, *err)
	}
}

func testConcurrentManyKeys(t *testing.T, c *Clock, s ratelimit.Store) {
	p := policy("p", ratelimit.PerSecond(1).WithBurst(5))
	const keys, goroutines = 20, 4
	counts := make([]atomic.Int64, keys)
	race(t, goroutines, func(g int) error {
		for i := range keys * 10 {
			k := (i + g) % keys
			res, err := s.Take(context.Background(), p, fmt.Sprint("key-", k), 1)
			if err != nil {
				return fmt.Errorf("Take(key-%d): %w", k, err)
			}
			if res.Allowed {
				counts[k].Add(1)
			}
		}
		return nil
	})
	for k := range counts {
		assert.Equal(t, int64(5), counts[k].Load(), "key-%d", k)
	}
}

func limiter(t *testing.T, s ratelimit.Store, ps ...ratelimit.Policy) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(s, ps...)
	require.NoError(t, err)
	return l
}

func limit(t *testing.T, l *ratelimit.Limiter, key string, cost int64) ratelimit.Result {
	t.Helper()
	res, err := l.Take(context.Background(), key, cost)
	require.NoError(t, err, "Take(%q, %d)", key, cost)
	return res
}

var global = ratelimit.Policy{Name: "global", Limit: ratelimit.PerSecond(1).WithBurst(4), Global: true}

// testGlobalCapacity: three clients, three requests each, under a global
// burst of 4 and generous per-client quotas: exactly 4 pass in all.
func testGlobalCapacity(t *testing.T, c *Clock, s ratelimit.Store) {
	l := limiter(t, s, ratelimit.Policy{Name: "per-client", Limit: fivePerSecond}, global)
	admitted := 0
	for _, client := range []string{"a", "b", "c"} {
		for range 3 {
			res := limit(t, l, client, 1)
			if res.Allowed {
				admitted++
				continue
			}
			assert.Equal(t, []string{"global"}, res.Violated)
			assert.Equal(t, "global", res.Policy.Name, "the refusing policy binds")
			assert.Equal(t, time.Second, res.RetryAfter)
			require.Len(t, res.Results, 2)
			assert.True(t, res.Results[0].Allowed, "the per-client policy would have allowed it")
		}
	}
	assert.Equal(t, 4, admitted)
}

// testRefusedByGlobal: a client refused by the global policy keeps its own
// tokens, as a later request proves.
func testRefusedByGlobal(t *testing.T, c *Clock, s ratelimit.Store) {
	perClient := ratelimit.Policy{Name: "per-client", Limit: ratelimit.Per(2, time.Hour)}
	g := ratelimit.Policy{Name: "global", Limit: ratelimit.PerSecond(1), Global: true}
	l := limiter(t, s, perClient, g)
	require.True(t, limit(t, l, "a", 1).Allowed)
	for range 3 {
		res := limit(t, l, "b", 1)
		require.False(t, res.Allowed)
		assert.Equal(t, []string{"global"}, res.Violated)
	}
	c.Advance(time.Second)
	res := limit(t, l, "b", 1)
	require.True(t, res.Allowed)
	assert.Equal(t, int64(1), res.Results[0].Remaining, "b's own bucket lost nothing to the refusals")
	c.Advance(time.Second)
	res = limit(t, l, "b", 1)
	require.True(t, res.Allowed)
	assert.Equal(t, int64(0), res.Results[0].Remaining)
	c.Advance(time.Second)
	res = limit(t, l, "b", 1)
	assert.Equal(t, []string{"per-client"}, res.Violated, "now b's own quota is spent")
}

// testBatchNoMoment: a BatchStore's TakeAll that one request refuses
// spends nothing from the others at any moment: a goroutine looking at a
// global bucket while batches run that an empty per-client bucket refuses
// never sees the global one spent. (A TakeAll that takes each request and
// gives back on a refusal shows the spend.) Skipped for a store that is no
// BatchStore, or whose TakeAll answers ratelimit.ErrNotAtomic.
func testBatchNoMoment(t *testing.T, c *Clock, s ratelimit.Store) {
	bs, ok := s.(ratelimit.BatchStore)
	if !ok {
		t.Skip("not a ratelimit.BatchStore")
	}
	l := limiter(t, s, ratelimit.Policy{Name: "global", Limit: ratelimit.PerSecond(1).WithBurst(1000), Global: true},
		ratelimit.Policy{Name: "per-client", Limit: ratelimit.Per(1, time.Hour)})
	global, perClient := &l.Policies()[0], &l.Policies()[1]
	ctx := context.Background()
	require.True(t, take(t, s, perClient, "c", 1).Allowed)
	batch := []ratelimit.BatchItem{{Policy: global, Key: "*", Cost: 1}, {Policy: perClient, Key: "c", Cost: 1}}
	if err := bs.TakeAll(ctx, batch, make([]ratelimit.Result, 2)); errors.Is(err, ratelimit.ErrNotAtomic) {
		t.Skip("TakeAll answers ErrNotAtomic")
	}
	const batchers, each = 4, 1000
	var finished atomic.Int64
	least := int64(1000)
	race(t, batchers+1, func(g int) error {
		if g == batchers { // the looker, until every batcher is done
			for finished.Load() < batchers {
				res, err := s.Take(ctx, global, "*", 0)
				if err != nil {
					return fmt.Errorf("Take(global): %w", err)
				}
				least = min(least, res.Remaining)
			}
			return nil
		}
		defer finished.Add(1)
		results := make([]ratelimit.Result, 2)
		for range each {
			if err := bs.TakeAll(ctx, batch, results); err != nil {
				return fmt.Errorf("TakeAll: %w", err)
			}
			if results[1].Allowed {
				return errors.New("TakeAll: the empty per-client bucket allowed a request")
			}
		}
		return nil
	})
	assert.Equal(t, int64(1000), least, "the global bucket, seen while refused batches ran")
}

// testMultiWindow: 5/s burst 10 and 15 a day; the result reports the
// policy closest to exhaustion, and a refusal the policy that refused.
func testMultiWindow(t *testing.T, c *Clock, s ratelimit.Store) {
	l := limiter(t, s, ratelimit.Policy{Name: "burst", Limit: fivePerSecond}, ratelimit.Policy{Name: "daily", Limit: ratelimit.Per(15, 24*time.Hour)})
	res := limit(t, l, "k", 1)
	assert.Equal(t, "burst", res.Policy.Name, "9 left of the burst, 14 of the day")
	assert.Equal(t, int64(9), res.Remaining)
	for range 9 {
		limit(t, l, "k", 1)
	}
	c.Advance(2 * time.Second)
	res = limit(t, l, "k", 1)
	assert.Equal(t, "daily", res.Policy.Name, "9 left of the burst, 4 of the day")
	assert.Equal(t, int64(4), res.Remaining)
	for range 4 {
		require.True(t, limit(t, l, "k", 1).Allowed)
	}
	res = limit(t, l, "k", 1)
	assert.False(t, res.Allowed)
	assert.Equal(t, []string{"daily"}, res.Violated)
	assert.Equal(t, 24*time.Hour/15-2*time.Second, res.RetryAfter)
}

// testDryRun: a dry-run policy decides and counts but never refuses.
func testDryRun(t *testing.T, c *Clock, s ratelimit.Store) {
	shadow := ratelimit.Policy{Name: "shadow", Limit: ratelimit.Per(2, time.Minute), DryRun: true}
	l := limiter(t, s, ratelimit.Policy{Name: "enforced", Limit: fivePerSecond}, shadow)
	var dry [][]string
	for range 5 {
		res := limit(t, l, "k", 1)
		require.True(t, res.Allowed)
		assert.Empty(t, res.Violated)
		assert.Equal(t, "enforced", res.Policy.Name, "dry-run policies never bind")
		dry = append(dry, res.DryRunViolated)
	}
	assert.Equal(t, [][]string{nil, nil, {"shadow"}, {"shadow"}, {"shadow"}}, dry)
	for range 5 {
		limit(t, l, "k", 1)
	}
	res := limit(t, l, "k", 1)
	assert.Equal(t, []string{"enforced"}, res.Violated)
	assert.Equal(t, []string{"shadow"}, res.DryRunViolated)
}

// testPoliciesConcurrent: in each of several rounds, goroutines released
// at once on mixed keys under per-client (5 an hour) and global (200 a
// second) policies admit at most 5 per client and exactly 200 in all, and
// no per-client token is lost to global refusals: once the global bucket
// refills, each client gets exactly what it has left.
func testPoliciesConcurrent(t *testing.T, c *Clock, s ratelimit.Store) {
	g := ratelimit.Policy{Name: "global", Limit: ratelimit.PerSecond(200), Global: true}
	l := limiter(t, s, ratelimit.Policy{Name: "per-client", Limit: ratelimit.Per(5, time.Hour)}, g)
	for round := range 4 {
		policiesConcurrentRound(t, c, l, fmt.Sprintf("round-%d-client-", round))
	}
}

func policiesConcurrentRound(t *testing.T, c *Clock, l *ratelimit.Limiter, prefix string) {
	const clients, goroutines, global = 60, 6, 200
	counts := make([]atomic.Int64, clients)
	race(t, goroutines, func(g int) error {
		for i := range clients * 3 {
			k := (i*7 + g) % clients
			res, err := l.Take(context.Background(), prefix+strconv.Itoa(k), 1)
			if err != nil {
				return fmt.Errorf("Take(%s%d): %w", prefix, k, err)
			}
			if res.Allowed {
				counts[k].Add(1)
			}
		}
		return nil
	})
	total := int64(0)
	for k := range counts {
		require.LessOrEqual(t, counts[k].Load(), int64(5), "%s%d", prefix, k)
		total += counts[k].Load()
	}
	require.Equal(t, int64(global), total, "the global capacity is spent exactly")
	c.Advance(time.Second)
	total = 0
	for k := range counts {
		left := limit(t, l, prefix+strconv.Itoa(k), 0).Results[0].Remaining
		assert.Equal(t, 5-counts[k].Load(), left, "%s%d's tokens", prefix, k)
		total += left
	}
	assert.Equal(t, int64(clients*5-global), total)
}

// testLeakyPolice runs the token bucket's steps through LeakyPolice: the
// meter makes the same decisions.
func testLeakyPolice(t *testing.T, c *Clock, s ratelimit.Store) {
	p := policy("p", fivePerSecond)
	p.Algorithm = ratelimit.LeakyPolice
	run(t, c, s, p, []step{
		{cost: 10, want: allowed(0, 2*time.Second)},
		{cost: 1, want: refused(0, 200*ms, 2*time.Second)},
		{advance: 200*ms - 1, cost: 1, want: refused(0, 1, 2*time.Second-200*ms+1)},
		{advance: 1, cost: 1, want: allowed(0, 2*time.Second)},
		{advance: 2 * time.Second, cost: 3, want: allowed(7, 600*ms)},
	})
}

func queued(remaining int64, delay, resetAfter time.Duration) ratelimit.Result {
	return ratelimit.Result{Allowed: true, Remaining: remaining, Delay: delay, ResetAfter: resetAfter}
}

// testShapeSchedule: 5/s, burst 10, twelve requests at once: one runs now,
// ten wait 0.2 s … 2.0 s, the twelfth is refused and waits for nothing.
func testShapeSchedule(t *testing.T, c *Clock, s ratelimit.Store) {
	var steps []step
	for i := range int64(11) {
		steps = append(steps, step{cost: 1, want: queued(min(10-i, 10), time.Duration(i)*200*ms, time.Duration(i+1)*200*ms)})
	}
	steps = append(steps, step{cost: 1, want: refused(0, 200*ms, 2200*ms)})
	run(t, c, s, shape("p", fivePerSecond), steps)
}

// testShapeEdge: a wait of exactly the queue's room (burst/rate) is
// admitted; one nanosecond more is refused.
func testShapeEdge(t *testing.T, c *Clock, s ratelimit.Store) {
	run(t, c, s, shape("p", fivePerSecond), []step{
		{cost: 10, want: queued(1, 0, 2*time.Second)},
		{cost: 1, want: queued(0, 2*time.Second, 2200*ms)},
		{cost: 1, want: refused(0, 200*ms, 2200*ms)},
		{advance: 200*ms - 1, cost: 1, want: refused(0, 1, 2*time.Second+1)},
		{advance: 1, cost: 1, want: queued(0, 2*time.Second, 2200*ms)},
	})
}

func testShapeCosts(t *testing.T, c *Clock, s ratelimit.Store) {
	run(t, c, s, shape("p", fivePerSecond), []step{
		{cost: 3, want: queued(8, 0, 600*ms)},
		{cost: 2, want: queued(6, 600*ms, time.Second)},
		{cost: 0, want: queued(6, 0, time.Second)},
		{cost: 6, want: queued(0, time.Second, 2200*ms)},
		{advance: 2200 * ms, cost: 1, want: queued(10, 0, 200*ms)}, // idle: the queue emptied
		{advance: time.Hour, cost: 10, want: queued(1, 0, 2*time.Second)},
	})
}

// testShapeImmediate is nginx's rate=5r/s burst=12 delay=8 with fifteen
// requests at once: nine pass at once, four wait 200 … 800 ms, two are
// refused.
func testShapeImmediate(t *testing.T, c *Clock, s ratelimit.Store) {
	p := shape("p", ratelimit.PerSecond(5).WithBurst(12))
	p.Immediate = 8
	var got []time.Duration
	refusedN := 0
	for range 15 {
		res := take(t, s, p, "k", 1)
		if res.Allowed {
			got = append(got, res.Delay)
		} else {
			refusedN++
		}
	}
	assert.Equal(t, []time.Duration{0, 0, 0, 0, 0, 0, 0, 0, 0, 200 * ms, 400 * ms, 600 * ms, 800 * ms}, got)
	assert.Equal(t, 2, refusedN)
}

func testShapeMaxDelay(t *testing.T, c *Clock, s ratelimit.Store) {
	p := shape("p", fivePerSecond)
	p.MaxDelay = 500 * ms
	run(t, c, s, p, []step{
		{cost: 1, want: queued(2, 0, 200*ms)},
		{cost: 1, want: queued(1, 200*ms, 400*ms)},
		{cost: 1, want: queued(0, 400*ms, 600*ms)},
		{cost: 1, want: refused(0, 100*ms, 600*ms)},
		{advance: 100 * ms, cost: 1, want: queued(0, 500*ms, 700*ms)},
	})
}

// resetStore returns s as a ResetStore, or skips the test.
func resetStore(t *testing.T, s ratelimit.Store) ratelimit.ResetStore {
	t.Helper()
	rs, ok := s.(ratelimit.ResetStore)
	if !ok {
		t.Skipf("%T is not a ratelimit.ResetStore", s)
	}
	return rs
}

func reset(t *testing.T, s ratelimit.ResetStore, p *ratelimit.Policy, key string) {
	t.Helper()
	before := *p
	require.NoError(t, s.Reset(context.Background(), p, key), "Reset(%q, %q)", p.Name, key)
	require.Equal(t, before, *p, "Reset(%q, %q) modified the policy", p.Name, key)
}

// testReset: Reset makes one bucket full again, exactly, and leaves the
// other keys' and the other policies' buckets as they were; forgetting a
// bucket that is not held, or twice, is not an error.
func testReset(t *testing.T, c *Clock, s ratelimit.Store) {
	rs := resetStore(t, s)
	a, b, q := policy("a", fivePerSecond), policy("b", fivePerSecond), shape("q", fivePerSecond)
	take(t, s, a, "k", 10)
	require.False(t, take(t, s, a, "k", 1).Allowed, "a/k drained, and refused (a store may remember the refusal)")
	take(t, s, a, "other", 3)
	take(t, s, b, "k", 4)
	take(t, s, q, "k", 5)

	reset(t, rs, a, "k")
	run(t, c, s, a, []step{{key: "k", cost: 0, want: allowed(10, 0)}})
	run(t, c, s, a, []step{{key: "other", cost: 0, want: allowed(7, 600*ms)}})
	run(t, c, s, b, []step{{key: "k", cost: 0, want: allowed(6, 800*ms)}})
	run(t, c, s, q, []step{{key: "k", cost: 1, want: queued(5, time.Second, 1200*ms)}})

	reset(t, rs, q, "k")
	run(t, c, s, q, []step{{key: "k", cost: 1, want: queued(10, 0, 200*ms)}})

	reset(t, rs, a, "never-seen")
	reset(t, rs, policy("unused", fivePerSecond), "k")
	reset(t, rs, a, "k") // already full
	run(t, c, s, a, []step{
		{key: "k", cost: 10, want: allowed(0, 2*time.Second)},
		{key: "k", cost: 1, want: refused(0, 200*ms, 2*time.Second)},
		{key: "other", cost: 0, want: allowed(7, 600*ms)},
	})
	run(t, c, s, b, []step{{key: "k", cost: 0, want: allowed(6, 800*ms)}})
}

// testResetConcurrent: one goroutine spends from and resets its own bucket
// over and over while others spend from other keys of the same policy: no
// other key loses or gains a token, and the reset bucket ends full.
func testResetConcurrent(t *testing.T, c *Clock, s ratelimit.Store) {
	rs := resetStore(t, s)
	p := policy("p", ratelimit.Per(1000, time.Hour))
	const keys, goroutines, resets = 12, 4, 50
	var spent [keys]atomic.Int64
	race(t, goroutines+1, func(g int) error {
		if g == goroutines { // the resetter
			for range resets {
				if _, err := s.Take(context.Background(), p, "reset-me", 7); err != nil {
					return fmt.Errorf("Take(reset-me): %w", err)
				}
				if err := rs.Reset(context.Background(), p, "reset-me"); err != nil {
					return fmt.Errorf("Reset(reset-me): %w", err)
				}
			}
			return nil
		}
		for i := range keys * 10 {
			k := (i*5 + g) % keys
			res, err := s.Take(context.Background(), p, fmt.Sprint("key-", k), 1)
			if err != nil {
				return fmt.Errorf("Take(key-%d): %w", k, err)
			}
			if res.Allowed {
				spent[k].Add(1)
			}
		}
		return nil
	})
	for k := range spent {
		assert.Equal(t, int64(10*goroutines), spent[k].Load(), "key-%d: requests admitted", k)
		left := take(t, s, p, fmt.Sprint("key-", k), 0).Remaining
		assert.Equal(t, 1000-spent[k].Load(), left, "key-%d: tokens left", k)
	}
	assert.Equal(t, int64(1000), take(t, s, p, "reset-me", 0).Remaining, "the reset bucket")
}

// testPoliciesReset: Limiter.Reset gives one client every per-client
// bucket back, dry-run ones included, and leaves the Global bucket, which
// every client shares, and the other clients' buckets as they were.
func testPoliciesReset(t *testing.T, c *Clock, s ratelimit.Store) {
	resetStore(t, s)
	g := ratelimit.Policy{Name: "global", Limit: ratelimit.Per(100, time.Hour), Global: true}
	shadow := ratelimit.Policy{Name: "shadow", Limit: ratelimit.Per(5, 24*time.Hour), DryRun: true}
	l := limiter(t, s, ratelimit.Policy{Name: "burst", Limit: fivePerSecond}, ratelimit.Policy{Name: "daily", Limit: ratelimit.Per(15, 24*time.Hour)}, g, shadow)
	for range 10 {
		require.True(t, limit(t, l, "a", 1).Allowed)
	}
	for range 3 {
		require.True(t, limit(t, l, "b", 1).Allowed)
	}
	res := limit(t, l, "a", 1)
	require.False(t, res.Allowed)
	assert.Equal(t, []string{"burst"}, res.Violated)

	require.NoError(t, l.Reset(context.Background(), "a"))
	remaining := func(key string) []int64 {
		t.Helper()
		var left []int64
		for _, r := range limit(t, l, key, 0).Results {
			left = append(left, r.Remaining)
		}
		return left
	}
	assert.Equal(t, []int64{10, 15, 87, 5}, remaining("a"), "a: burst, daily, global, shadow")
	assert.Equal(t, []int64{7, 12, 87, 2}, remaining("b"), "b: burst, daily, global, shadow")
	require.NoError(t, l.Reset(context.Background(), "never-seen"))
	assert.ErrorIs(t, l.Reset(context.Background(), ""), ratelimit.ErrMissingKey)
}

// testBan: the Ban algorithm, a penalty box's ban, whose state is the time
// it ends: a request of cost 0 asks and is refused until then, to the
// nanosecond; a positive cost bans for that many nanoseconds, but is
// refused, and changes nothing, while a ban is on; a batch with a banned
// key's question spends nothing.
func testBan(t *testing.T, c *Clock, s ratelimit.Store) {
	ban := &ratelimit.Policy{Name: "p/ban", Limit: ratelimit.Per(1, time.Nanosecond), Algorithm: algo.Ban}
	run(t, c, s, ban, []step{
		{cost: 0, want: allowed(0, 0)},
		{cost: int64(time.Minute), want: allowed(0, time.Minute)},
		{cost: 0, want: refused(0, time.Minute, time.Minute)},
		{advance: time.Minute - 1, cost: 0, want: refused(0, 1, 1)},
		{cost: 1, want: refused(0, 1, 1)},                // a ban in force is not replaced,
		{cost: int64(time.Hour), want: refused(0, 1, 1)}, // by a shorter ban or a longer
		{advance: 1, cost: 0, want: allowed(0, 0)},
		{cost: int64(time.Second), key: "other", want: allowed(0, time.Second)},
		{cost: 0, want: allowed(0, 0)},
	})
	bs, ok := s.(ratelimit.BatchStore)
	if !ok {
		return
	}
	p := policy("p", fivePerSecond)
	reqs := []ratelimit.BatchItem{{Policy: p, Key: "{other}", Cost: 1}, {Policy: ban, Key: "{other}"}}
	ban.Name, p.Name = "q/ban", "q" // keys of one slot on a Cluster: the tag is the key
	take(t, s, ban, "{other}", int64(time.Second))
	results := make([]ratelimit.Result, 2)
	err := bs.TakeAll(context.Background(), reqs, results)
	if errors.Is(err, ratelimit.ErrNotAtomic) {
		return
	}
	require.NoError(t, err)
	assert.False(t, results[1].Allowed, "the ban refuses the batch")
	assert.Equal(t, int64(10), take(t, s, p, "{other}", 0).Remaining, "the batch spent nothing")
}

// penalized is a policy of 1 request an hour whose key is banned for a
// minute on its third refusal within 10 s (strikes: 2, one back every 5 s).
var penalized = ratelimit.Policy{Name: "login", Limit: ratelimit.Per(1, time.Hour),
	Penalty: ratelimit.Penalty{After: 3, Within: 10 * time.Second, For: time.Minute}}

// refusal checks that a request of key is refused by the policies violated,
// and returns its RetryAfter.
func refusal(t *testing.T, l *ratelimit.Limiter, key string, violated ...string) time.Duration {
	t.Helper()
	res := limit(t, l, key, 1)
	require.False(t, res.Allowed, "Take(%q)", key)
	require.Equal(t, violated, res.Violated, "Take(%q)", key)
	return res.RetryAfter
}

// testPenaltyBans: the third refusal in a row bans for exactly For, every
// request is refused until the nanosecond the ban ends, whatever the
// bucket holds, refusals during the ban count no strike, and other keys
// are not banned.
func testPenaltyBans(t *testing.T, c *Clock, s ratelimit.Store) {
	daily := ratelimit.Policy{Name: "daily", Limit: ratelimit.Per(100, 24*time.Hour)}
	l := limiter(t, s, penalized, daily)
	require.True(t, limit(t, l, "k", 1).Allowed)
	require.True(t, limit(t, l, "other", 1).Allowed)
	assert.Equal(t, time.Hour, refusal(t, l, "k", "login"))
	assert.Equal(t, time.Hour, refusal(t, l, "k", "login"))
	assert.Equal(t, time.Minute, refusal(t, l, "k", "login/ban"), "the third refusal bans")
	assert.Equal(t, time.Hour, refusal(t, l, "other", "login"), "other keys are not banned")
	c.Advance(time.Minute - 1)
	for range 5 {
		assert.Equal(t, time.Duration(1), refusal(t, l, "k", "login/ban"), "refused to the nanosecond")
	}
	assert.Equal(t, int64(99), limit(t, limiter(t, s, daily), "k", 0).Remaining, "refusals spend nothing elsewhere")
	c.Advance(1)
	assert.Equal(t, time.Hour-time.Minute, refusal(t, l, "k", "login"), "the ban is over: the bucket decides")
	assert.Equal(t, time.Hour-time.Minute, refusal(t, l, "k", "login"), "the refusals during the ban counted no strike")
	assert.Equal(t, time.Minute, refusal(t, l, "k", "login/ban"))

	// A bucket that would allow does not end a ban.
	c.Advance(2 * time.Hour)
	assert.Equal(t, int64(1), limit(t, l, "k", 0).Remaining, "a full bucket")
	one := limiter(t, s, ratelimit.Policy{Name: "login", Limit: ratelimit.Per(1, time.Hour),
		Penalty: ratelimit.Penalty{After: 1, For: time.Minute}})
	require.True(t, limit(t, one, "k", 1).Allowed)
	assert.Equal(t, time.Minute, refusal(t, one, "k", "login/ban"), "After: 1 bans at the first refusal")
	c.Advance(time.Hour)
	assert.Equal(t, int64(1), limit(t, one, "k", 0).Remaining)
}

// testPenaltyStrikesAge: strikes come back one every Within ÷ (After − 1):
// three refusals within 5 s ban, three within 5 s and a nanosecond do
// not, and neither do refusals spread over Within.
func testPenaltyStrikesAge(t *testing.T, c *Clock, s ratelimit.Store) {
	l := limiter(t, s, penalized)
	for _, key := range []string{"a", "b", "c"} {
		require.True(t, limit(t, l, key, 1).Allowed)
		refusal(t, l, key, "login")
		refusal(t, l, key, "login")
	}
	c.Advance(5*time.Second - 1)
	refusal(t, l, "a", "login/ban")
	c.Advance(1)
	refusal(t, l, "b", "login")
	c.Advance(10 * time.Second)
	refusal(t, l, "c", "login")
	refusal(t, l, "c", "login")
	refusal(t, l, "c", "login/ban")
}

// testPenaltyBackOff: with Max, a key banned again as soon as each ban
// ends is banned 1, 2, 4, then 5 minutes (the cap) and 5 again; after a
// long quiet spell, 1 minute again.
func testPenaltyBackOff(t *testing.T, c *Clock, s ratelimit.Store) {
	p := ratelimit.Policy{Name: "login", Limit: ratelimit.Per(1, 24*time.Hour),
		Penalty: ratelimit.Penalty{After: 2, Within: 10 * time.Second, For: time.Minute, Max: 5 * time.Minute}}
	l := limiter(t, s, p)
	require.True(t, limit(t, l, "k", 1).Allowed)
	var bans []time.Duration
	for range 6 {
		refusal(t, l, "k", "login")
		ban := refusal(t, l, "k", "login/ban")
		bans = append(bans, ban)
		c.Advance(ban)
	}
	assert.Equal(t, []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute}, bans)
	c.Advance(4 * 10 * time.Minute)
	refusal(t, l, "k", "login")
	assert.Equal(t, time.Minute, refusal(t, l, "k", "login/ban"), "every ban forgotten")
}

// testPenaltyReset: Limiter.Reset ends a ban and forgets the strikes.
func testPenaltyReset(t *testing.T, c *Clock, s ratelimit.Store) {
	resetStore(t, s)
	l := limiter(t, s, penalized)
	require.True(t, limit(t, l, "k", 1).Allowed)
	refusal(t, l, "k", "login")
	refusal(t, l, "k", "login")
	refusal(t, l, "k", "login/ban")
	require.NoError(t, l.Reset(context.Background(), "k"))
	require.True(t, limit(t, l, "k", 1).Allowed, "the ban is over")
	refusal(t, l, "k", "login")
	refusal(t, l, "k", "login")
	refusal(t, l, "k", "login/ban")
}
