package redisstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
	"github.com/tokenfair/ratelimit/storetest"
)

// TestGiveBacks runs the give-back tests on one server, on a Cluster, and
// with leases, whose tokens go back into the lease that paid for them.
func TestGiveBacks(t *testing.T) {
	single := redistest.Start(t).Client()
	cluster, _ := redistest.StartCluster(t, 3)
	var n atomic.Int64
	for _, tc := range []struct {
		name   string
		client redis.Scripter
		lease  time.Duration
	}{
		{"single", single, 0},
		{"cluster", cluster, 0},
		{"leases", single, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.RunGiveBacks(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
				return newStore(t, tc.client, &redisstore.Options{Clock: now, Lease: tc.lease,
					Prefix: fmt.Sprintf("giveback%d:", n.Add(1)), Timeout: 2 * time.Second})
			})
		})
	}
}
