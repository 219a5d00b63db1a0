package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

// RunGiveBacks runs the suite's tests of give-backs alone: GiveBackModel,
// which Run runs too, GiveBacksOverlap, which it does not (give-backs
// that overlap on one bucket are exact), and Model without its exact
// decisions (that nothing passes the limit). It is for a
// [ratelimit.RefundStore] configured so that the suite's other tests do
// not hold, such as a Redis store that leases tokens.
func RunGiveBacks(t *testing.T, newStore NewStore) {
	t.Helper()
	runTests(t, newStore, []test{
		{"GiveBackModel", testGiveBackModel},
		{"GiveBacksOverlap", testGiveBacksOverlap},
		{"Model", modelChecks(false)},
	})
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

// testGiveBacksOverlap: three requests of one key are open at once and
// none counts; whatever the order they finish in, the bucket is full
// again, as if none had come. A store that counts what was given back of
// a later take against an earlier one gives back less. Eight requests
// given back in the order they came, or the reverse, get back all they
// ask too.
func testGiveBacksOverlap(t *testing.T, c *Clock, s ratelimit.Store) {
	rs, ok := s.(ratelimit.RefundStore)
	if !ok {
		t.Skipf("%T is not a ratelimit.RefundStore", s)
	}
	p := policy("overlap", fivePerSecond)
	for i, order := range [][3]int{{0, 1, 2}, {2, 1, 0}, {1, 0, 2}, {1, 2, 0}, {0, 2, 1}, {2, 0, 1}} {
		key := fmt.Sprint("o", i)
		var took [3]ratelimit.Result
		for k := range took {
			took[k] = take(t, s, p, key, 2)
			require.True(t, took[k].Allowed)
			if took[k].Degraded {
				t.Skip("decided by a fallback, which gives nothing back")
			}
		}
		for _, k := range order {
			require.NoError(t, rs.Refund(context.Background(), p, key, 2, took[k]))
		}
		res := take(t, s, p, key, 0)
		require.Equal(t, int64(10), res.Remaining, "finished in the order %v: the bucket is full again", order)
	}
	// Eight streams of one key, more than a bucket remembers one by one,
	// each settled at 1 of the 3 it reserved, last first or first first:
	// each gets back its 2 (the streams of a model API end in any order).
	p = policy("overlap8", ratelimit.PerSecond(5).WithBurst(24))
	for i, reverse := range []bool{true, false} {
		key := fmt.Sprint("e", i)
		var took [8]ratelimit.Result
		for k := range took {
			took[k] = take(t, s, p, key, 3)
			require.True(t, took[k].Allowed)
		}
		for k := range took {
			if reverse {
				k = len(took) - 1 - k
			}
			require.NoError(t, rs.Refund(context.Background(), p, key, 2, took[k]))
		}
		assert.Equal(t, int64(24-8), take(t, s, p, key, 0).Remaining, "eight settled at 1, the last first: %v", reverse)
	}
}

// testGiveBackModel: requests are taken, held open while the clock moves
// and other requests come, then finish counted or not (a refund: CountIf's
// give-back); now and then the bucket is reset. Whatever the order, the
// requests that count, with the resets, must be a sequence that one exact
// bucket admits at the times they were taken: give-backs never bank
// tokens beyond the burst. It fails on a store that gives back a take's
// whole cost whenever it comes back (the banking of open requests).
func testGiveBackModel(t *testing.T, c *Clock, s ratelimit.Store) {
	rs, ok := s.(ratelimit.RefundStore)
	if !ok {
		t.Skipf("%T is not a ratelimit.RefundStore", s)
	}
	resetter, _ := s.(ratelimit.ResetStore)
	policies := []*ratelimit.Policy{policy("model", fivePerSecond), shape("model-queue", fivePerSecond)}
	ctx := context.Background()
	steps := []time.Duration{0, 0, 0, 1, 37 * ms, 200 * ms, time.Second, 2500 * ms}
	for seed := range uint64(6) {
		for _, p := range policies {
			rng := rand.New(rand.NewPCG(seed, 26))
			key := fmt.Sprint("m", seed)
			type open struct {
				at   int64 // when it was taken
				cost int64
				took ratelimit.Result
				n    int // its index in events
			}
			var held []open
			var events []event // the counted takes and the resets, in order
			finish := func(i int, counted bool) {
				o := held[i]
				held = append(held[:i], held[i+1:]...)
				if counted {
					events[o.n].counted = true
					return
				}
				require.NoError(t, rs.Refund(ctx, p, key, o.cost, o.took), "Refund(%q, %q, %d)", p.Name, key, o.cost)
			}
			for range 200 {
				c.Advance(steps[rng.IntN(len(steps))])
				now := c.Now().UnixNano()
				// A greedy client: requests until one is refused, each held
				// open; then some of the open ones finish, the oldest
				// first more often (held across refills, as a banking
				// client holds them), a third of them not counted.
				for range 1 + rng.IntN(12) {
					cost := 1 + rng.Int64N(3)
					res := take(t, s, p, key, cost)
					if !res.Allowed {
						break
					}
					held = append(held, open{at: now, cost: cost, took: res, n: len(events)})
					events = append(events, event{at: now, cost: cost})
				}
				for range rng.IntN(len(held) + 1) {
					i := 0
					if rng.IntN(3) == 0 {
						i = rng.IntN(len(held))
					}
					finish(i, rng.IntN(3) != 0)
				}
				if rng.IntN(40) == 0 && resetter != nil {
					require.NoError(t, resetter.Reset(ctx, p, key))
					events = append(events, event{at: now, reset: true})
				}
			}
			for len(held) > 0 {
				finish(0, rng.IntN(2) == 0)
			}
			if err := admits(p, events); err != nil {
				t.Fatalf("seed %d, %s: %v", seed, p.Name, err)
			}
		}
	}
}

// event is a request that was admitted (counted or given back), or a reset.
type event struct {
	at      int64
	cost    int64
	counted bool
	reset   bool
}

// admits returns an error unless one exact bucket of p, reset at the
// resets, admits every counted request of events at the time it was taken.
func admits(p *ratelimit.Policy, events []event) error {
	iv, tau := int64(p.Limit.Interval()), p.Limit.Burst()*int64(p.Limit.Interval())
	var tat int64 // the model's state: 0 is a full bucket
	var trail []string
	for i, e := range events {
		switch {
		case e.reset:
			tat = 0
			trail = append(trail, fmt.Sprintf("reset at %v", time.Duration(e.at-epoch.UnixNano())))
		case e.counted:
			start := max(tat, e.at)
			ok := start+e.cost*iv-e.at <= tau // the token bucket's depth
			if p.Algorithm == ratelimit.LeakyShape {
				ok = start-e.at <= tau // the queue's room
			}
			trail = append(trail, fmt.Sprintf("counted %d at %v", e.cost, time.Duration(e.at-epoch.UnixNano())))
			if !ok {
				if len(trail) > 12 {
					trail = trail[len(trail)-12:]
				}
				return fmt.Errorf("counted request %d (cost %d at %v) is one an exact bucket refuses: %d tokens over; the last events: %s",
					i, e.cost, time.Duration(e.at-epoch.UnixNano()), (start+e.cost*iv-e.at-tau+iv-1)/iv, strings.Join(trail, "; "))
			}
			tat = start + e.cost*iv
		}
	}
	return nil
}
