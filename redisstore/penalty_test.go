package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/refusers"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
	"github.com/tokenfair/ratelimit/storetest"
)

// TestPenaltyRoundTrips: on Redis, a request of a penalized policy is one
// script call (the ban asked in the same call as the bucket decides), on
// one server and on a Cluster when the key has a hash tag; during a ban,
// with the refusal cache, one call a second at most.
func TestPenaltyRoundTrips(t *testing.T) {
	p := ratelimit.Policy{Name: "login", Limit: ratelimit.Per(2, time.Hour),
		Penalty: ratelimit.Penalty{After: 2, Within: time.Minute, For: 10 * time.Minute}}
	t.Run("server", func(t *testing.T) {
		c := redistest.Start(t).Client()
		testPenaltyRoundTrips(t, p, c, func() int64 { return scripts(t, c) })
	})
	t.Run("cluster", func(t *testing.T) {
		client, nodes := redistest.StartCluster(t, 3)
		testPenaltyRoundTrips(t, p, client, func() int64 {
			n := int64(0)
			for _, node := range nodes {
				n += scripts(t, node.Client())
			}
			return n
		})
	})
}

func testPenaltyRoundTrips(t *testing.T, p ratelimit.Policy, client redis.Scripter, calls func() int64) {
	c := new(storetest.Clock)
	lim := func(client redis.Scripter, opts redisstore.Options) *ratelimit.Limiter {
		opts.Clock = c.Now
		l, err := ratelimit.New(newStore(t, client, &opts), p)
		require.NoError(t, err)
		return l
	}
	direct := lim(client, redisstore.Options{NoRefusalCache: true})
	ctx := context.Background()
	take := func(l *ratelimit.Limiter, want int64, allowed bool, violated ...string) {
		t.Helper()
		before := calls()
		res, err := l.Take(ctx, "{mallory}", 1)
		require.NoError(t, err)
		require.Equal(t, allowed, res.Allowed)
		if !allowed {
			assert.Equal(t, violated, refusers.Names(res, false))
		}
		assert.Equal(t, want, calls()-before, "script calls")
	}
	_, err := direct.Take(ctx, "{mallory}-warm-up", 0)
	require.NoError(t, err)
	take(direct, 1, true)
	take(direct, 1, true)
	take(direct, 2, false, "login")     // the refusal, then a strike
	take(direct, 3, false, "login/ban") // the refusal, the last strike, the ban
	take(direct, 1, false, "login/ban") // one call without the cache

	cached := lim(client, redisstore.Options{})
	take(cached, 1, false, "login/ban") // it asks once
	for range 100 {
		take(cached, 0, false, "login/ban") // then not again for a second
	}
	c.Advance(time.Second)
	take(cached, 1, false, "login/ban") // once a second: a reset elsewhere would be seen
	take(cached, 0, false, "login/ban")
	c.Advance(10*time.Minute - time.Second)
	take(cached, 2, false, "login") // the ban is over: the bucket refuses; a strike
}

// TestBanResetReachesOtherInstances: an instance whose refusal cache holds
// a ban asks Redis again within a second, so that a reset made on another
// instance lifts the ban there too.
func TestBanResetReachesOtherInstances(t *testing.T) {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	p := ratelimit.Policy{Name: "login", Limit: ratelimit.Per(1, time.Hour), Penalty: ratelimit.Penalty{After: 1, For: time.Hour}}
	lim := func() *ratelimit.Limiter {
		l, err := ratelimit.New(newStore(t, client, &redisstore.Options{Clock: c.Now}), p)
		require.NoError(t, err)
		return l
	}
	a, b := lim(), lim()
	ctx := context.Background()
	take := func(l *ratelimit.Limiter) ratelimit.Result {
		t.Helper()
		res, err := l.Take(ctx, "mallory", 1)
		require.NoError(t, err)
		return res
	}
	require.True(t, take(a).Allowed)
	require.Equal(t, []string{"login/ban"}, refusers.Names(take(a), false))
	require.Equal(t, []string{"login/ban"}, refusers.Names(take(b), false), "b learns of the ban")
	require.NoError(t, a.Reset(ctx, "mallory"))
	c.Advance(time.Second - 1)
	assert.Equal(t, []string{"login/ban"}, refusers.Names(take(b), false), "b's cache still answers")
	c.Advance(1)
	assert.True(t, take(b).Allowed, "a second on, b asks Redis: the reset lifted the ban")
}

// TestPenaltyWithLeases: with leases, asking whether a busy key is banned
// costs no more round trips than its leases (an answer "not banned" is
// kept for the lease time), and a ban made on another instance is seen a
// lease time late at most.
func TestPenaltyWithLeases(t *testing.T) {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	const lease = 50 * time.Millisecond
	p := ratelimit.Policy{Name: "api", Limit: ratelimit.PerSecond(1000).WithBurst(800),
		Penalty: ratelimit.Penalty{After: 1, For: time.Hour}}
	a, err := ratelimit.New(newStore(t, client, &redisstore.Options{Clock: c.Now, Lease: lease}), p)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = a.Take(ctx, "warm-up", 0)
	require.NoError(t, err)
	before := scripts(t, client)
	for range 200 {
		res, err := a.Take(ctx, "busy", 1)
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	calls := scripts(t, client) - before
	t.Logf("200 requests, %d script calls", calls)
	assert.Less(t, calls, int64(20))

	// Another instance bans the key (its bucket of 1 spent, it is refused).
	ban, err := ratelimit.New(newStore(t, client, &redisstore.Options{Clock: c.Now}),
		ratelimit.Policy{Name: "api", Limit: ratelimit.Per(1, time.Hour), Penalty: p.Penalty})
	require.NoError(t, err)
	_, err = ban.Take(ctx, "busy-2", 1)
	require.NoError(t, err)
	require.NoError(t, ban.Reset(ctx, "busy-2"))
	res, err := a.Take(ctx, "busy-2", 1) // a finds busy-2 not banned
	require.NoError(t, err)
	require.True(t, res.Allowed)
	res, err = ban.Take(ctx, "busy-2", 1)
	require.NoError(t, err)
	require.False(t, res.Allowed)
	res, err = ban.Take(ctx, "busy-2", 1)
	require.NoError(t, err)
	require.Equal(t, []string{"api/ban"}, refusers.Names(res, false), "banned")
	c.Advance(lease - 1)
	res, err = a.Take(ctx, "busy-2", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "within a lease time, a has not seen the ban")
	c.Advance(1)
	res, err = a.Take(ctx, "busy-2", 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"api/ban"}, refusers.Names(res, false), "a lease time on, it has")
}
