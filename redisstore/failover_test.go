package redisstore_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/failover"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
	"github.com/tokenfair/ratelimit/storetest"
)

var modes = []failover.Mode{failover.Open, failover.Closed, failover.Local}

// newFailover returns a failover store of mode over primary, with a
// memorystore as its Local store and clock as its probe schedule's.
func newFailover(t *testing.T, primary ratelimit.Store, mode failover.Mode, clock func() time.Time) *failover.Store {
	t.Helper()
	local, err := memorystore.New(nil)
	require.NoError(t, err)
	fo, err := failover.New(primary, &failover.Options{Mode: mode, Local: local, Clock: clock,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return fo
}

// TestFailoverRecoversDespiteCanceledRequests: Redis is killed and
// restarted, and every request that would probe it is preceded by one
// whose context has already ended (as an HTTP/2 client's HEADERS and
// RST_STREAM sent together give). Such a request learns nothing of Redis
// and hands the probe on, so the next request probes and the store
// recovers at once, in every mode. (Before, the canceled requests took
// every probe: 0 of 200 requests were decided by Redis again, and in Open
// mode a 1/min client got 200 of 200 through.)
func TestFailoverRecoversDespiteCanceledRequests(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	ctx := context.Background()
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			clock := new(storetest.Clock)
			fo := newFailover(t, newStore(t, srv.Client(), &redisstore.Options{Timeout: callTimeout}), mode, clock.Now)
			lim, err := ratelimit.New(fo, ratelimit.Policy{Limit: ratelimit.Per(1, time.Minute)})
			require.NoError(t, err)
			_, err = lim.Take(ctx, "warm-up", 1)
			require.NoError(t, err)

			srv.Kill()
			_, _ = lim.Take(ctx, "c", 1)
			require.False(t, fo.Healthy())
			srv.Restart()

			checked, admitted := 0, 0
			for range 200 {
				clock.Advance(250 * time.Millisecond) // a probe is due
				_, _ = lim.Take(canceled, "c", 1)     // healthy, the refusal cache may answer it
				res, err := lim.Take(ctx, "c", 1)
				if err == nil && !res.Degraded {
					checked++
				}
				if err == nil && res.Allowed {
					admitted++
				}
			}
			assert.Equal(t, 200, checked, "requests decided by Redis, of 200")
			assert.Equal(t, 1, admitted, "admitted through a 1/min limit, of 200")
			assert.True(t, fo.Healthy())
		})
	}
}

// TestFailoverProbeAsksRedis: while Redis is down, the probe of a
// failover.Store asks Redis itself (Store.Probe), so that a key whose
// lease still answers without Redis does not make the store healthy; once
// Redis is back, the probe does.
func TestFailoverProbeAsksRedis(t *testing.T) {
	srv := redistest.Start(t)
	clock := new(storetest.Clock)
	primary := newStore(t, srv.Client(), &redisstore.Options{Timeout: callTimeout, Lease: 10 * time.Second, Clock: clock.Now})
	fo, err := failover.New(primary, &failover.Options{Mode: failover.Closed, Clock: clock.Now, ProbeInterval: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	lim, err := ratelimit.New(fo, ratelimit.Policy{Limit: ratelimit.PerSecond(100).WithBurst(1000)})
	require.NoError(t, err)
	ctx := context.Background()
	for range 20 { // a busy key: it holds a lease
		_, err := lim.Take(ctx, "busy", 1)
		require.NoError(t, err)
	}

	srv.Kill()
	_, err = lim.Take(ctx, "quiet", 1)
	require.ErrorIs(t, err, ratelimit.ErrStore)
	require.False(t, fo.Healthy())
	clock.Advance(time.Second)
	_, err = lim.Take(ctx, "busy", 1) // the probe: its lease would answer
	require.ErrorIs(t, err, ratelimit.ErrStore, "Closed refuses: the probe reached no Redis")
	assert.False(t, fo.Healthy(), "a lease's answer is no sign of Redis's health")

	srv.Restart()
	clock.Advance(time.Second)
	res, err := lim.Take(ctx, "busy", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.True(t, fo.Healthy(), "the probe reached Redis")
}
