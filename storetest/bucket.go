package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

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
