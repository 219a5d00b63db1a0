package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// startReplicated starts a primary and a replica of it, in sync, and
// waits until the primary streams its writes to the replica: after a full
// sync, a primary sends a replica nothing until the replica's first
// acknowledgement, which Redis 7.0 sends up to a second later, and a WAIT
// meanwhile times out. It writes one key, "ready", for that, and resets
// the primary's command statistics after.
func startReplicated(t testing.TB) (primary, replica *redistest.Server) {
	t.Helper()
	primary = redistest.Start(t, "--repl-diskless-sync-delay", "0")
	host, port, _ := strings.Cut(primary.Addr, ":")
	replica = redistest.Start(t, "--replicaof", host, port)
	redistest.WaitReplica(t, replica, primary.Addr)
	ctx := context.Background()
	pc := primary.Client()
	require.Eventually(t, func() bool {
		pipe := pc.Pipeline()
		pipe.Set(ctx, "ready", 1, 0)
		wait := pipe.Do(ctx, "wait", 1, 50)
		_, err := pipe.Exec(ctx)
		n, _ := wait.Int64()
		return err == nil && n == 1
	}, 10*time.Second, time.Millisecond, "the replica acknowledges a write")
	require.NoError(t, pc.ConfigResetStat(ctx).Err())
	return primary, replica
}

// With WaitReplicas, a decision returns once the replica has its write:
// read on the replica right after, every bucket is there; each round trip
// ends with one WAIT on the primary, and concurrent decisions still share
// round trips.
func TestWaitReplicas(t *testing.T) {
	primary, replica := startReplicated(t)
	store, err := redisstore.New(primary.Client(), &redisstore.Options{WaitReplicas: 1, Timeout: time.Second})
	require.NoError(t, err)
	l, err := ratelimit.New(store, ratelimit.Policy{Name: "p", Limit: ratelimit.Per(10, time.Minute)})
	require.NoError(t, err)
	ctx := context.Background()
	rc := replica.Client()
	for i := range 20 {
		key := "k" + string(rune('a'+i))
		res, err := l.Take(ctx, key, 1)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		n, err := rc.Exists(ctx, "ratelimit:p:"+key).Result()
		require.NoError(t, err)
		assert.Equal(t, int64(1), n, "the replica has the write of %s when the decision returns", key)
	}
	pc := primary.Client()
	assert.Equal(t, redistest.Commands(t, pc, "evalsha")+redistest.Commands(t, pc, "eval"), redistest.Commands(t, pc, "wait"), "one WAIT per script call")
}

// A replica that does not acknowledge in time fails the decision, within
// the store's Timeout, with ErrStore naming WaitReplicas: a failover.Store
// then applies its Mode.
func TestWaitReplicasUnacknowledged(t *testing.T) {
	primary, replica := startReplicated(t)
	// The WAIT has 3/4 of the Timeout, the round trip the rest: a quarter
	// that a loaded machine keeps.
	const timeout = time.Second
	store, err := redisstore.New(primary.Client(), &redisstore.Options{WaitReplicas: 1, Timeout: timeout})
	require.NoError(t, err)
	l, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.Per(10, time.Minute)})
	require.NoError(t, err)
	_, err = l.Take(context.Background(), "k", 1)
	require.NoError(t, err)

	replica.Pause()
	defer replica.Resume()
	start := time.Now()
	_, err = l.Take(context.Background(), "k", 1)
	took := time.Since(start)
	require.ErrorIs(t, err, ratelimit.ErrStore)
	assert.Contains(t, err.Error(), "Options.WaitReplicas 1: WAIT: 0 acknowledged in time")
	assert.Less(t, took, timeout+slack, "within the Timeout, and a margin")
}

func TestWaitReplicasOptions(t *testing.T) {
	_, err := redisstore.New(redistest.Start(t).Client(), &redisstore.Options{WaitReplicas: -1})
	require.ErrorContains(t, err, "Options.WaitReplicas -1")
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true})
	defer ring.Close()
	_, err = redisstore.New(ring, &redisstore.Options{WaitReplicas: 1})
	require.ErrorContains(t, err, "the *redis.Ring cannot say which primary ran a write")
}
