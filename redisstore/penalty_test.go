package redisstore_test

import (
	"context"
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

// TestPenaltyRoundTrips: on Redis, a request of a penalized policy is one
// script call (the ban asked in the same call as the bucket decides), on
// one server and on a Cluster when the key has a hash tag; during a ban,
// with the refusal cache, no call at all, on the instance that banned and
// on another once it has asked once.
func TestPenaltyRoundTrips(t *testing.T) {
	p := ratelimit.Policy{Name: "login", Limit: ratelimit.PerHour(2),
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
			assert.Equal(t, violated, res.Violated())
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
		take(cached, 0, false, "login/ban") // then never again while the ban lasts
	}
	c.Advance(10*time.Minute - 1)
	take(cached, 0, false, "login/ban")
	c.Advance(1)
	take(cached, 1, false, "login") // the ban is over: the cache refuses for the bucket; a strike
}
