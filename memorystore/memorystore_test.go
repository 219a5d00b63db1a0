package memorystore

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t *testing.T, opts ...Option) *Store {
	t.Helper()
	s, err := New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		return newStore(t, WithClock(now))
	})
}

func TestConformanceOneShard(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		return newStore(t, WithClock(now), WithShards(1), WithSweepInterval(0))
	})
}

var p = ratelimit.Policy{Name: "p", Limit: ratelimit.PerSecond(5).WithBurst(10)}

func TestOptionErrors(t *testing.T) {
	for _, opt := range []Option{WithClock(nil), WithMaxKeys(0), WithShards(0), WithSweepInterval(-1)} {
		_, err := New(opt)
		assert.Error(t, err)
	}
}

func TestFullBucketsAreDropped(t *testing.T) {
	c := new(storetest.Clock)
	s := newStore(t, WithClock(c.Now), WithSweepInterval(0))
	ctx := context.Background()
	_, _ = s.Take(ctx, p, "peek", 0)
	assert.Equal(t, 0, s.Len(), "a peek at a new key stores nothing")
	_, _ = s.Take(ctx, p, "a", 1)
	_, _ = s.Take(ctx, p, "b", 10)
	assert.Equal(t, 2, s.Len())
	c.Advance(200 * time.Millisecond)
	_, _ = s.Take(ctx, p, "a", 0)
	assert.Equal(t, 1, s.Len(), "a key touched when full again is dropped")
	c.Advance(2 * time.Second)
	s.sweep()
	assert.Equal(t, 0, s.Len(), "the sweep drops keys whose buckets are full")
}

func TestSweepShrinksMaps(t *testing.T) {
	c := new(storetest.Clock)
	s := newStore(t, WithClock(c.Now), WithSweepInterval(0), WithShards(1))
	for i := range 5000 {
		_, _ = s.Take(context.Background(), p, strconv.Itoa(i), 1)
	}
	c.Advance(time.Second)
	_, _ = s.Take(context.Background(), p, "fresh", 10)
	c.Advance(100 * time.Millisecond)
	s.sweep()
	assert.Equal(t, 1, s.Len())
	res, _ := s.Take(context.Background(), p, "fresh", 1)
	assert.False(t, res.Allowed, "the live key survived the copy")
}

func TestMaxKeys(t *testing.T) {
	c := new(storetest.Clock)
	s := newStore(t, WithClock(c.Now), WithSweepInterval(0), WithMaxKeys(100), WithShards(4))
	ctx := context.Background()
	// A drained bucket for a key we care about, then a flood of unique keys.
	_, _ = s.Take(ctx, p, "victim", 10)
	for i := range 10_000 {
		c.Advance(time.Microsecond)
		res, err := s.Take(ctx, p, fmt.Sprint("flood-", i), 1)
		require.NoError(t, err)
		require.True(t, res.Allowed, "new keys are always admitted at the cap")
		require.LessOrEqual(t, s.Len(), 100)
	}
	assert.Equal(t, 100, s.Len())
}

func TestMaxKeysEvictsNearlyFullFirst(t *testing.T) {
	c := new(storetest.Clock)
	s := newStore(t, WithClock(c.Now), WithSweepInterval(0), WithMaxKeys(8), WithShards(1))
	ctx := context.Background()
	_, _ = s.Take(ctx, p, "drained", 10) // full again in 2 s
	for i := range 7 {
		_, _ = s.Take(ctx, p, fmt.Sprint("light-", i), 1) // full again in 200 ms
	}
	_, _ = s.Take(ctx, p, "new", 1)
	assert.Equal(t, 8, s.Len())
	res, _ := s.Take(ctx, p, "drained", 1)
	assert.False(t, res.Allowed, "the drained key (farthest from full) is kept")
}

func TestExpiredKeysMakeRoomBeforeEviction(t *testing.T) {
	c := new(storetest.Clock)
	s := newStore(t, WithClock(c.Now), WithSweepInterval(0), WithMaxKeys(3), WithShards(1))
	ctx := context.Background()
	_, _ = s.Take(ctx, p, "short-1", 1)
	_, _ = s.Take(ctx, p, "short-2", 1)
	_, _ = s.Take(ctx, p, "long", 10)
	c.Advance(300 * time.Millisecond) // the short ones are full again, "long" is not
	_, _ = s.Take(ctx, p, "new", 1)
	assert.Equal(t, 2, s.Len(), "every expired key in the sample was dropped")
	res, _ := s.Take(ctx, p, "long", 2)
	assert.False(t, res.Allowed, "the drained key (1.5 tokens) was kept")
}

func TestCloseStopsSweep(t *testing.T) {
	s, err := New(WithSweepInterval(time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	res, err := s.Take(context.Background(), p, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "Take still works after Close")
	// goleak in TestMain fails the run if the sweep goroutine survived.
}

func TestTakeDoesNotAllocate(t *testing.T) {
	s := newStore(t, WithSweepInterval(0))
	slow := ratelimit.Policy{Name: "slow", Limit: ratelimit.PerHour(1).WithBurst(1000)}
	ctx := context.Background()
	_, _ = s.Take(ctx, slow, "present", 1)
	allocs := testing.AllocsPerRun(1000, func() { _, _ = s.Take(ctx, slow, "present", 0) })
	assert.Zero(t, allocs)
	allocs = testing.AllocsPerRun(500, func() { _, _ = s.Take(ctx, slow, "present", 1) })
	assert.Zero(t, allocs)

	reqs := []ratelimit.Request{{Policy: slow, Key: "present", Cost: 1}, {Policy: ratelimit.Policy{Name: "global", Limit: slow.Limit}, Key: "*", Cost: 1}}
	results := make([]ratelimit.Result, len(reqs))
	require.NoError(t, s.TakeAll(ctx, reqs, results))
	allocs = testing.AllocsPerRun(300, func() { _ = s.TakeAll(ctx, reqs, results) })
	assert.Zero(t, allocs, "a batch of keys held")
}
