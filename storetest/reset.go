package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/refusers"
)

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
	assert.Equal(t, []string{"burst"}, refusers.Names(res, false))

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
