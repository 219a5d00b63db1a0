package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
	"github.com/tokenfair/ratelimit/storetest"
)

// TestLongKeys: a 100 kB key (from a custom key function that forgot to
// hash it) is limited like any other, under a short Redis key name that does
// not hold it; in-flight slots too.
func TestLongKeys(t *testing.T) {
	client := redistest.Start(t).Client()
	s := newStore(t, client, &redisstore.Options{Prefix: "long:"})
	ctx := context.Background()
	long, other := strings.Repeat("s3cr3t", 100_000/6), strings.Repeat("s3cr3t", 100_000/6)+"!"
	for range 10 {
		res, err := s.Take(ctx, slow, long, 1)
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	res, err := s.Take(ctx, slow, long, 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "the long key's burst is spent")
	res, err = s.Take(ctx, slow, other, 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "a different long key has its own bucket")
	ok, err := s.Acquire(ctx, long, "t", 1, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)

	keys, err := client.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 3)
	for _, k := range keys {
		assert.Less(t, len(k), 100, "key name %.40q…", k)
		assert.NotContains(t, k, "s3cr3t")
	}
}

// TestKeysExpire: every key carries a TTL that ends when its bucket is full
// again, so Redis holds nothing that carries no information. Decided on
// the Redis server's clock, which also expires the keys.
func TestKeysExpire(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	s := newStore(t, client, &redisstore.Options{Prefix: "ttl:"})
	ctx := context.Background()
	shape := *slow
	shape.Name, shape.Algorithm = "queue", ratelimit.LeakyShape
	for i := range 50 {
		_, err := s.Take(ctx, slow, fmt.Sprint("client-", i), int64(1+i%10))
		require.NoError(t, err)
		_, err = s.Take(ctx, &shape, fmt.Sprint("client-", i), 1)
		require.NoError(t, err)
	}
	keys, err := client.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 100)
	for _, k := range keys {
		require.True(t, strings.HasPrefix(k, "ttl:api:client-") || strings.HasPrefix(k, "ttl:queue:client-"), k)
		ttl, err := client.PTTL(ctx, k).Result()
		require.NoError(t, err)
		assert.Positive(t, ttl, "key %s has a TTL", k)
		assert.LessOrEqual(t, ttl, 100*time.Second, "key %s lives at most until its bucket is full", k)
	}
	// A cost of 1 out of 10 is earned back in 10 s: the TTL says so.
	_, err = s.Take(ctx, slow, "one", 1)
	require.NoError(t, err)
	ttl, err := client.PTTL(ctx, "ttl:api:one").Result()
	require.NoError(t, err)
	assert.InDelta(t, float64(10*time.Second), float64(ttl), float64(time.Second))
}

// TestKeysOnClockOutliveTheirState: Redis expires keys on its own clock, so
// a key decided on Options.Clock, which may run behind it (a test's clock
// stands still while Redis's runs on), is kept 10 s longer than its state
// matters: it must not expire into a full bucket before Clock says so.
func TestKeysOnClockOutliveTheirState(t *testing.T) {
	client := redistest.Start(t).Client()
	clock := new(storetest.Clock)
	s := newStore(t, client, &redisstore.Options{Clock: clock.Now, Prefix: "ttl:"})
	ctx := context.Background()
	_, err := s.Take(ctx, policy, "one", 1) // full again in 200 ms on Clock
	require.NoError(t, err)
	ttl, err := client.PTTL(ctx, "ttl:api:one").Result()
	require.NoError(t, err)
	// (PTTL only falls as real time runs; without the 10 s it would be 200 ms.)
	assert.LessOrEqual(t, ttl, 10*time.Second+200*time.Millisecond)
	assert.Greater(t, ttl, 9*time.Second)
	ok, err := s.Acquire(ctx, "one", "t", 1, time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	ttl, err = client.PTTL(ctx, "ttl::inflight:one").Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, ttl, 11*time.Second)
	assert.Greater(t, ttl, 10*time.Second)
}

func TestClusterManyKeys(t *testing.T) {
	client, servers := redistest.StartCluster(t, 3)
	s := newStore(t, client, &redisstore.Options{Timeout: 5 * time.Second}) // the first calls discover the slots and dial
	ctx := context.Background()
	for i := range 300 {
		res, err := s.Take(ctx, slow, fmt.Sprint("user-", i), 10)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		res, err = s.Take(ctx, slow, fmt.Sprint("user-", i), 1)
		require.NoError(t, err)
		require.False(t, res.Allowed, "user-%d drained", i)
	}
	for _, srv := range servers {
		n, err := srv.Client().DBSize(ctx).Result()
		require.NoError(t, err)
		assert.Greater(t, n, int64(50), "keys spread over every node (%s)", srv.Addr)
	}

	// Several policies in one atomic step when the keys share a slot (a
	// hash tag); errors.ErrUnsupported, having done nothing, when they do not.
	daily := &ratelimit.Policy{Name: "daily", Limit: ratelimit.Per(3, 24*time.Hour)}
	results := make([]ratelimit.Result, 2)
	for i := range 3 {
		err := s.TakeAll(ctx, []ratelimit.BatchItem{{Policy: slow, Key: "{tenant-1}", Cost: 1}, {Policy: daily, Key: "{tenant-1}", Cost: 1}}, results)
		require.NoError(t, err)
		assert.True(t, results[0].Allowed && results[1].Allowed, "request %d", i+1)
	}
	err := s.TakeAll(ctx, []ratelimit.BatchItem{{Policy: slow, Key: "{tenant-1}", Cost: 1}, {Policy: daily, Key: "{tenant-1}", Cost: 1}}, results)
	require.NoError(t, err)
	assert.False(t, results[1].Allowed, "the daily quota is spent")
	res, err := s.Take(ctx, slow, "{tenant-1}", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(7), res.Remaining, "the refused batch spent nothing from the other policy")

	global := &ratelimit.Policy{Name: "global", Limit: ratelimit.PerSecond(100), Global: true}
	err = s.TakeAll(ctx, []ratelimit.BatchItem{{Policy: slow, Key: "user-1", Cost: 1}, {Policy: global, Key: "*", Cost: 1}}, results)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
}

func TestPrefix(t *testing.T) {
	client := redistest.Start(t).Client()
	a := newStore(t, client, &redisstore.Options{Prefix: "app-a:"})
	b := newStore(t, client, &redisstore.Options{Prefix: "app-b:"})
	ctx := context.Background()
	_, err := a.Take(ctx, slow, "k", 10)
	require.NoError(t, err)
	res, err := b.Take(ctx, slow, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, int64(9), res.Remaining, "another prefix is another bucket")
	n, err := client.Exists(ctx, "app-a:api:k", "app-b:api:k").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(2), n)
}
