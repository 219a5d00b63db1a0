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
// store must read time only from it. It checks exact decisions, that keys
// and policies never share a bucket, and an exact count under concurrency;
// the tests of an optional interface ([ratelimit.ResetStore],
// [ratelimit.RefundStore], [ratelimit.BatchStore]) are skipped for a store
// that does not implement it.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

// NewStore returns a fresh, empty store that reads time from now. It may
// register cleanups with t.
type NewStore func(t *testing.T, now func() time.Time) ratelimit.Store

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
		{"QuotaWithRate", testQuotaWithRate},
		{"Debt", testDebt},
		{"DebtCharge", testDebtCharge},
		{"ChangedLimit", testChangedLimit},
		{"LimitForUpgrade", testLimitForUpgrade},
		{"LimitForGiveBack", testLimitForGiveBack},
		{"UnitsTogether", testUnitsTogether},
		{"Model", modelChecks(true)},
	})
	runTests(t, newStore, quotaTests)
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
