package redisstore_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/failover"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

const (
	callTimeout = 150 * time.Millisecond
	// slack covers scheduling on a loaded 2-core machine and the race
	// detector: no call may take longer than its deadline plus this.
	slack = time.Second
)

// TestFaults kills, pauses and restarts a real Redis under load, for each
// failure mode: no call waits past its deadline, each mode answers as
// specified while Redis is down, and the limiter is healthy again within
// two seconds of Redis answering (a probe every 100 ms; the rest is room
// for a loaded machine). With leases, the same holds, but for the
// tokens of a lease taken before the failure, which are spent until the
// lease ends.
func TestFaults(t *testing.T) {
	for _, mode := range []failover.Mode{failover.Open, failover.Closed, failover.Local} {
		t.Run(mode.String(), func(t *testing.T) { testFaults(t, mode, 0) })
		t.Run(mode.String()+"/leases", func(t *testing.T) { testFaults(t, mode, 30*time.Millisecond) })
	}
}

func testFaults(t *testing.T, mode failover.Mode, lease time.Duration) {
	srv := redistest.Start(t)
	primary := newStore(t, srv.Client(), &redisstore.Options{Timeout: callTimeout, Lease: lease})
	local, err := memorystore.New(nil)
	require.NoError(t, err)
	fo, err := failover.New(primary, &failover.Options{
		Mode: mode, Local: local, Instances: 2, ProbeInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	lim, err := ratelimit.New(fo, ratelimit.Policy{Limit: ratelimit.PerSecond(1000).WithBurst(1000)})
	require.NoError(t, err)

	// take makes one decision and checks that it answered in time and as
	// the mode says. Redis is down since downAt, if not zero.
	var downAt time.Time
	take := func() {
		t.Helper()
		start := time.Now()
		res, err := lim.Take(context.Background(), "k", 1)
		elapsed := time.Since(start)
		assert.Less(t, elapsed, callTimeout+slack, "a call took %v", elapsed)
		switch {
		case downAt.IsZero() && err == nil && !res.Degraded:
			// healthy, or already recovered
		case err == nil && !res.Degraded && start.Before(downAt.Add(lease)):
			// a lease taken before the failure, not ended yet
		case mode == failover.Closed:
			assert.ErrorIs(t, err, ratelimit.ErrStore)
		default:
			if assert.NoError(t, err) {
				assert.True(t, res.Degraded, "%+v", res)
				assert.True(t, res.Allowed)
			}
		}
	}
	// load runs take on 4 goroutines for d.
	load := func(d time.Duration) {
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for end := time.Now().Add(d); time.Now().Before(end); {
					take()
					time.Sleep(5 * time.Millisecond)
				}
			}()
		}
		wg.Wait()
	}
	// recovered waits for the first healthy decision and returns how long
	// it took.
	recovered := func() time.Duration {
		start := time.Now()
		for time.Since(start) < 5*time.Second {
			res, err := lim.Take(context.Background(), "k", 1)
			if err == nil && !res.Degraded {
				return time.Since(start)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return time.Since(start)
	}

	load(200 * time.Millisecond)
	require.True(t, fo.Healthy())

	downAt = time.Now()
	srv.Kill()
	load(300 * time.Millisecond)
	assert.False(t, fo.Healthy())
	srv.Restart()
	downAt = time.Time{}
	assert.Less(t, recovered(), 2*time.Second, "recovery after a restart")

	downAt = time.Now()
	srv.Pause()
	load(300 * time.Millisecond)
	assert.False(t, fo.Healthy())
	srv.Resume()
	downAt = time.Time{}
	assert.Less(t, recovered(), 2*time.Second, "recovery after a pause")
}

// TestFaultWithoutFailover: a bare store reports the failure as an error
// within its deadline.
func TestFaultWithoutFailover(t *testing.T) {
	srv := redistest.Start(t)
	lim, err := ratelimit.New(newStore(t, srv.Client(), &redisstore.Options{Timeout: callTimeout}), ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	require.NoError(t, err)
	srv.Kill()
	start := time.Now()
	_, err = lim.Take(context.Background(), "k", 1)
	assert.Less(t, time.Since(start), callTimeout+slack)
	assert.ErrorIs(t, err, ratelimit.ErrStore)
	assert.ErrorContains(t, err, "redisstore: ", "the store's own error, not a failover's refusal")
}
