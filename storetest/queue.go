package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/tokenfair/ratelimit"
)

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
