package bench

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// leasePeers are the rows of BenchmarkRedisLease: the bare INCR floor, and
// ours without and with token leases.
var leasePeers = []redisPeer{
	redisPeers[0],
	{"tokenfair", tokenfairRedis(redisstore.Options{})},
	{"tokenfair-lease", tokenfairRedis(redisstore.Options{Lease: 50 * time.Millisecond})},
}

// leaseRuns numbers the runs of BenchmarkRedisLease, so that every run has
// keys of its own: no run finds a bucket or a lease another one left.
var leaseRuns atomic.Int64

// BenchmarkRedisLease measures token leases (redisstore.Options.Lease)
// under 8×GOMAXPROCS goroutines, every request allowed: hot, 8 keys taken
// in turn, whose leases grow until most decisions never reach Redis; cold,
// a fresh key for every decision, which leases cannot help (a key seen once
// takes its cost and no lease), to show they cost nothing there. It
// reports the client's round trips and the commands Redis ran per
// decision.
func BenchmarkRedisLease(b *testing.B) {
	srv := redistest.Start(b)
	for _, traffic := range []string{"hot", "cold"} {
		for _, peer := range leasePeers {
			b.Run(traffic+"/"+peer.name, func(b *testing.B) {
				prefix := "lease-" + strconv.FormatInt(leaseRuns.Add(1), 10) + ":"
				hot := make([]string, 8)
				for i := range hot {
					hot[i] = prefix + "hot-" + strconv.Itoa(i)
				}
				key := func(n int64) string { return hot[n%int64(len(hot))] }
				if traffic == "cold" {
					key = func(n int64) string { return prefix + strconv.FormatInt(n, 10) }
				}
				runRedis(b, srv, peer, true, key)
			})
		}
	}
}
