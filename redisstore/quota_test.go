package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
	"github.com/tokenfair/ratelimit/storetest"
)

// TestQuotasWithLeases runs the calendar quotas' tests with leases, on one
// server and on a Cluster: a quota's tokens are never leased, and its
// decisions are exact beside leasing policies.
func TestQuotasWithLeases(t *testing.T) {
	single := redistest.Start(t).Client()
	cluster, _ := redistest.StartCluster(t, 3)
	var n atomic.Int64
	for name, client := range map[string]redis.Scripter{"single": single, "cluster": cluster} {
		t.Run(name, func(t *testing.T) {
			storetest.RunQuotas(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
				return newStore(t, client, &redisstore.Options{Clock: now, Lease: 50 * time.Millisecond,
					Prefix: fmt.Sprintf("quota%d:", n.Add(1))})
			})
		})
	}
}

// TestQuotaKeyExpiresAtTheReset: a quota's key is kept until its period
// ends on the script's clock (plus the 10 s kept on a caller's clock), not
// for the span of its state, a time past that end.
func TestQuotaKeyExpiresAtTheReset(t *testing.T) {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	s := newStore(t, client, &redisstore.Options{Clock: c.Now, Prefix: "q:"})
	p := &ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(5, time.UTC)}
	c.Advance(10 * time.Hour)
	res, err := s.Take(context.Background(), p, "k", 2)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	ttl, err := client.PTTL(context.Background(), "q:daily:k").Result()
	require.NoError(t, err)
	want := 14*time.Hour + 10*time.Second + time.Millisecond // 2 ns rounded up to the millisecond
	assert.InDelta(t, float64(want), float64(ttl), float64(time.Second))
}

// steppingClock is a store's Clock that returns the times given, one a
// call, then the last again and again.
type steppingClock struct {
	mu    sync.Mutex
	times []time.Time
}

func (c *steppingClock) set(times ...time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.times = times
}

func (c *steppingClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.times[0]
	if len(c.times) > 1 {
		c.times = c.times[1:]
	}
	return t
}

// TestQuotaPeriodOfTheScript: the script decides a quota at the end of the
// caller's period while its own clock is before it, else at the next
// period's end: a request sent a nanosecond before midnight and decided at
// midnight (the store reads its Clock for the caller's period, then for
// the script's time) finds the quota whole; one sent at midnight and
// decided a nanosecond before it is decided in the caller's period, the
// new day.
func TestQuotaPeriodOfTheScript(t *testing.T) {
	client := redistest.Start(t).Client()
	clock := new(steppingClock)
	s := newStore(t, client, &redisstore.Options{Clock: clock.now, NoRefusalCache: true})
	p := &ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(5, time.UTC)}
	midnight := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	take := func(key string, cost int64) ratelimit.Result {
		t.Helper()
		res, err := s.Take(context.Background(), p, key, cost)
		require.NoError(t, err)
		return res
	}
	clock.set(midnight.Add(-time.Hour))
	require.True(t, take("a", 5).Allowed)
	require.True(t, take("b", 5).Allowed)
	require.False(t, take("a", 1).Allowed)

	clock.set(midnight.Add(-1), midnight)
	res := take("a", 1)
	assert.True(t, res.Allowed, "decided at midnight: the next day's quota")
	assert.Equal(t, int64(4), res.Remaining)
	assert.Equal(t, 24*time.Hour, res.ResetAfter)

	clock.set(midnight, midnight.Add(-1))
	res = take("b", 1)
	assert.True(t, res.Allowed, "sent at midnight: the new day's quota, decided before it")
	assert.Equal(t, int64(4), res.Remaining)
	assert.Equal(t, 24*time.Hour+1, res.ResetAfter)
}

// TestRefusalCacheQuota: once a calendar quota is spent, the store refuses
// the key locally, as Redis would, until the reset (asking Redis again
// each second); a request that fits what the last answer left goes to
// Redis; after the reset the quota is whole again.
func TestRefusalCacheQuota(t *testing.T) {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	s := newStore(t, client, &redisstore.Options{Clock: c.Now})
	p := &ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(5, time.UTC)}
	ctx := context.Background()
	take := func(cost int64) ratelimit.Result {
		t.Helper()
		res, err := s.Take(ctx, p, "k", cost)
		require.NoError(t, err)
		return res
	}
	c.Advance(10 * time.Hour)
	require.True(t, take(3).Allowed)
	res := take(3)
	require.False(t, res.Allowed, "2 left")
	before := scripts(t, client)
	res = take(3)
	res.Until = 0 // the cache's own
	assert.Equal(t, ratelimit.Result{Policy: p, Remaining: 2, RetryAfter: 14 * time.Hour, ResetAfter: 14 * time.Hour}, res)
	assert.Equal(t, before, scripts(t, client), "refused without Redis")
	require.True(t, take(2).Allowed, "what is left is asked of Redis")
	assert.Equal(t, before+1, scripts(t, client))

	before = scripts(t, client)
	for range 5 {
		res = take(1)
		res.Until = 0
		assert.Equal(t, ratelimit.Result{Policy: p, RetryAfter: 14 * time.Hour, ResetAfter: 14 * time.Hour}, res)
	}
	assert.Equal(t, before, scripts(t, client), "refused without Redis")
	c.Advance(time.Second)
	assert.False(t, take(1).Allowed)
	assert.Equal(t, before+1, scripts(t, client), "asked again a second later")

	// A batch with a quota the cache knows nothing of: its result is a
	// whole quota's, the refusal the cached rate's.
	rate := &ratelimit.Policy{Name: "rate", Limit: ratelimit.PerSecond(1)}
	_, err := s.Take(ctx, rate, "r", 1)
	require.NoError(t, err)
	_, err = s.Take(ctx, rate, "r", 1)
	require.NoError(t, err)
	results := make([]ratelimit.Result, 2)
	require.NoError(t, s.TakeAll(ctx, []ratelimit.BatchItem{{Policy: rate, Key: "r", Cost: 1}, {Policy: p, Key: "r", Cost: 1}}, results))
	assert.False(t, results[0].Allowed)
	results[1].Until = 0
	assert.Equal(t, ratelimit.Result{Allowed: true, Policy: p, Remaining: 4, ResetAfter: 14*time.Hour - time.Second}, results[1])

	c.Advance(14*time.Hour - time.Second)
	res = take(5)
	assert.True(t, res.Allowed, "the next day")
	assert.Equal(t, 24*time.Hour, res.ResetAfter)
}

// TestRefusalCacheAnswersForItsLimitOnly: what the cache learnt of a key
// under one limit does not answer for the key under another (the key's
// limit changed: Policy.LimitFor). A daily quota spent in UTC is refused
// until 00:00 UTC; the same key's quota moved to Paris, where the day
// began at 23:00 UTC, is whole at once, though the cached refusal still
// holds for UTC.
func TestRefusalCacheAnswersForItsLimitOnly(t *testing.T) {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	s := newStore(t, client, &redisstore.Options{Clock: c.Now})
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	utc := &ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(5, time.UTC)}
	moved := &ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(5, paris)}
	ctx := context.Background()
	c.Advance(23*time.Hour - 500*time.Millisecond)
	res, err := s.Take(ctx, utc, "k", 5)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	res, err = s.Take(ctx, utc, "k", 1)
	require.NoError(t, err)
	require.False(t, res.Allowed)
	c.Advance(500 * time.Millisecond) // 23:00 UTC, midnight in Paris; the refusal answers for 0.5 s more
	before := scripts(t, client)
	res, err = s.Take(ctx, utc, "k", 1)
	require.NoError(t, err)
	require.False(t, res.Allowed)
	require.Equal(t, before, scripts(t, client), "the refusal cached under UTC")
	res, err = s.Take(ctx, moved, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "a new day in Paris")
	assert.Equal(t, 24*time.Hour, res.ResetAfter)
}

// TestLeaseAnswersForItsLimitOnly: a lease taken under one limit does not
// pay for the key under another: the key's next request goes to Redis,
// with the lease given back, and is decided by the new limit. A key that
// took 3 tokens of PerSecond(1) burst 80 (1 of them still in its lease)
// and is then given Per(1, time.Hour) burst 2 has one token: a request,
// then a refusal. (Spent from the lease, the first would leave a token
// that the exact bucket does not have.)
func TestLeaseAnswersForItsLimitOnly(t *testing.T) {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	s := newStore(t, client, &redisstore.Options{Clock: c.Now, Lease: 50 * time.Millisecond})
	before := &ratelimit.Policy{Name: "plan", Limit: ratelimit.PerSecond(1).WithBurst(80)}
	after := &ratelimit.Policy{Name: "plan", Limit: ratelimit.Per(1, time.Hour).WithBurst(2)}
	ctx := context.Background()
	take := func(p *ratelimit.Policy) ratelimit.Result {
		t.Helper()
		res, err := s.Take(ctx, p, "k", 1)
		require.NoError(t, err)
		return res
	}
	require.True(t, take(before).Allowed) // its cost
	require.True(t, take(before).Allowed) // a lease of 2, 1 left
	calls := scripts(t, client)
	res := take(after)
	assert.True(t, res.Allowed)
	assert.Equal(t, int64(0), res.Remaining)
	assert.Equal(t, time.Hour+2*time.Second, res.ResetAfter, "3 s spent, less the 1 s given back, and an hour")
	assert.Equal(t, calls+1, scripts(t, client), "decided in Redis, the lease given back in the same trip")
	assert.False(t, take(after).Allowed)
}
