package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
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

// The conformance suite's Reset tests run in TestConformance,
// TestConformanceCluster and TestConformanceNoBatching.

// Reset makes the bucket full and no other: not the same key under another
// policy, not another key, not a long key's hashed name, not a hash-tagged
// key's on a Cluster. The key keeps only its credit, for as long as that
// lasts.
func TestResetDeletesOneKey(t *testing.T) {
	single := redistest.Start(t).Client()
	cluster, _ := redistest.StartCluster(t, 3)
	for name, client := range map[string]redis.UniversalClient{"single": single, "cluster": cluster} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t, client, &redisstore.Options{Prefix: "reset:"})
			ctx := context.Background()
			other := &ratelimit.Policy{Name: "other", Limit: policy.Limit}
			long := strings.Repeat("k", 200)
			for _, k := range []string{"a", "b", "{tenant}a", long} {
				for _, p := range []*ratelimit.Policy{policy, other} {
					_, err := s.Take(ctx, p, k, 3)
					require.NoError(t, err)
				}
			}
			count := func() int {
				t.Helper()
				var n atomic.Int64
				err := forEachShard(ctx, client, func(c *redis.Client) error {
					keys, err := c.Keys(ctx, "reset:*").Result()
					for _, k := range keys {
						if v, err := c.Get(ctx, k).Result(); err == nil && !strings.Contains(v, ";") {
							n.Add(1) // a bucket that owes tokens; a reset one holds only its credit
						}
					}
					return err
				})
				require.NoError(t, err)
				return int(n.Load())
			}
			require.Equal(t, 8, count())
			for i, k := range []string{"a", "{tenant}a", long} {
				require.NoError(t, s.Reset(ctx, policy, k))
				assert.Equal(t, 7-i, count(), "after Reset(%q)", k)
				res, err := s.Take(ctx, policy, k, 0)
				require.NoError(t, err)
				assert.Equal(t, int64(10), res.Remaining, "%q is full", k)
				res, err = s.Take(ctx, other, k, 0)
				require.NoError(t, err)
				assert.Equal(t, int64(7), res.Remaining, "%q under another policy", k)
			}
			res, err := s.Take(ctx, policy, "b", 0)
			require.NoError(t, err)
			assert.Equal(t, int64(7), res.Remaining, "another key")
			require.NoError(t, s.Reset(ctx, policy, "never-seen"))
			assert.Equal(t, 5, count(), "no key for a bucket never seen")
		})
	}
}

// forEachShard calls fn with each node of a Cluster, at once, or with the
// client.
func forEachShard(ctx context.Context, c redis.UniversalClient, fn func(*redis.Client) error) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return fn(c) })
	}
	return fn(c.(*redis.Client))
}

// After a Reset the refusal cache no longer refuses the key on this
// instance; another instance's cache still refuses it until the bound it
// holds passes, as documented.
func TestResetRefusalCache(t *testing.T) {
	client := redistest.Start(t).Client()
	clock := new(storetest.Clock)
	a := newStore(t, client, &redisstore.Options{Clock: clock.Now})
	b := newStore(t, client, &redisstore.Options{Clock: clock.Now})
	ctx := context.Background()
	res, err := a.Take(ctx, policy, "k", 10)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	for _, s := range []*redisstore.Store{a, b} {
		res, err := s.Take(ctx, policy, "k", 1)
		require.NoError(t, err)
		require.False(t, res.Allowed, "each instance caches the refusal")
	}

	require.NoError(t, a.Reset(ctx, policy, "k"))
	res, err = a.Take(ctx, policy, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "the instance that reset asks Redis")
	assert.Equal(t, int64(9), res.Remaining)
	res, err = b.Take(ctx, policy, "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "another instance refuses from its cache")
	clock.Advance(200 * time.Millisecond)
	res, err = b.Take(ctx, policy, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "until its bound passes, and asks Redis")
	assert.Equal(t, int64(9), res.Remaining, "from the reset bucket: one token spent, one earned since")
}

// Reset fails at once with the cause when Redis is not there, and reports
// a reply that is not DEL's.
func TestResetErrors(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.Client(), nil)
	srv.Kill()
	start := time.Now()
	err := s.Reset(context.Background(), policy, "k")
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.ErrorContains(t, err, "redisstore: Reset: ")
	assert.Less(t, time.Since(start), slack, "at once, not at the deadline (2 s)")

	for _, reply := range []any{"OK", int64(2), nil} {
		s := newStore(t, fakeScripter{reply: reply}, &redisstore.Options{SkipContextTimeoutCheck: true})
		assert.ErrorContains(t, s.Reset(context.Background(), policy, "k"), "redisstore: Reset: malformed reply", "%#v", reply)
	}
	s = newStore(t, fakeScripter{reply: int64(0)}, &redisstore.Options{SkipContextTimeoutCheck: true})
	assert.NoError(t, s.Reset(context.Background(), policy, "k"), "any Scripter")
	s = newStore(t, fakeScripter{err: errors.New("READONLY You can't write against a read only replica.")}, &redisstore.Options{SkipContextTimeoutCheck: true})
	assert.ErrorContains(t, s.Reset(context.Background(), policy, "k"), "READONLY")
}

// After a Reset, this instance spends nothing more from the lease it held:
// the key's next request goes to Redis and finds the bucket full.
func TestResetDropsTheLease(t *testing.T) {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	s := newStore(t, client, &redisstore.Options{Clock: c.Now, Lease: 50 * time.Millisecond})
	p := &ratelimit.Policy{Name: "api", Limit: ratelimit.PerSecond(1).WithBurst(80)} // leases of 10 at most
	ctx := context.Background()
	take := func() ratelimit.Result {
		t.Helper()
		res, err := s.Take(ctx, p, "k", 1)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		return res
	}
	for range 4 { // the last took a lease of 4 and spent 1 of it
		take()
	}
	before := scripts(t, client)
	assert.Equal(t, int64(75), take().Remaining, "from the lease")
	require.Equal(t, int64(0), scripts(t, client)-before, "a lease spent locally")

	require.NoError(t, s.Reset(ctx, p, "k"))
	before = scripts(t, client)
	assert.Equal(t, int64(79), take().Remaining, "a full bucket")
	assert.Equal(t, int64(1), scripts(t, client)-before, "asked Redis")
}
