package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/refusers"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
	"github.com/tokenfair/ratelimit/storetest"
)

// A Redis that restarts without persistence (or runs FLUSHALL) forgets
// every state: what it costs, per key and kind of state, is measured
// here, as docs/stores.md states it. A spent bucket admits its burst
// again, a spent calendar quota its whole count, a ban is lifted (the
// strikes start again), and in-flight slots are free again. Nothing
// more: after the loss, each starts from its full state and holds.
func TestRestartLosesState(t *testing.T) {
	srv := redistest.Start(t)
	clock := new(storetest.Clock)
	clock.Advance(6 * time.Hour)
	store, err := redisstore.New(srv.Client(), &redisstore.Options{Clock: clock.Now, NoRefusalCache: true})
	require.NoError(t, err)
	ctx := context.Background()
	rate, err := ratelimit.New(store, ratelimit.Policy{Name: "rate", Limit: ratelimit.Per(10, time.Hour)})
	require.NoError(t, err)
	daily, err := ratelimit.New(store, ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(5, time.UTC)})
	require.NoError(t, err)
	login, err := ratelimit.New(store, ratelimit.Policy{Name: "login", Limit: ratelimit.Per(1, time.Hour),
		Penalty: ratelimit.Penalty{After: 2, Within: time.Minute, For: time.Hour}})
	require.NoError(t, err)

	admitted := func(l *ratelimit.Limiter, key string, n int) int {
		t.Helper()
		ok := 0
		for range n {
			res, err := l.Take(ctx, key, 1)
			require.NoError(t, err)
			if res.Allowed {
				ok++
			}
		}
		return ok
	}
	spend := func() {
		t.Helper()
		require.Equal(t, 10, admitted(rate, "k", 30), "the burst")
		require.Equal(t, 5, admitted(daily, "k", 30), "the day's quota")
		require.Equal(t, 1, admitted(login, "k", 5), "one, then two strikes ban")
		res, err := login.Take(ctx, "k", 1)
		require.NoError(t, err)
		require.Equal(t, []string{"login/ban"}, refusers.Names(res, false), "banned")
		s, err := store.Acquire(ctx, "slots", "a", 2, time.Hour)
		require.NoError(t, err)
		require.True(t, s)
		s, err = store.Acquire(ctx, "slots", "b", 2, time.Hour)
		require.NoError(t, err)
		require.True(t, s)
		s, err = store.Acquire(ctx, "slots", "c", 2, time.Hour)
		require.NoError(t, err)
		require.False(t, s, "two slots of two held")
	}
	spend()
	require.NoError(t, srv.Client().FlushAll(ctx).Err())
	// Each state is full again, once: spent again, it holds as before.
	spend()

	srv.Restart() // no persistence: the same loss
	assert.Equal(t, 10, admitted(rate, "k", 30), "after a restart: the burst again, no more")
	assert.Equal(t, 5, admitted(daily, "k", 30), "after a restart: the quota again, no more")
}
