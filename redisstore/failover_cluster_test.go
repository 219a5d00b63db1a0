package redisstore_test

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// clusterArgs configure every Cluster node of these tests: a node serves
// its own slots while another primary is down. (By default the whole
// cluster refuses every key, CLUSTERDOWN, from the moment a primary is
// marked failing until its replica takes over.)
var clusterArgs = []string{"--cluster-require-full-coverage", "no"}

// clusterKeys returns n keys for each shard of c, and the shard of each.
// A key is a hash tag, "{kI}", so that its slot is the same under every
// Prefix and policy.
func clusterKeys(c *redistest.Cluster, n int) (keys []string, shard map[string]int) {
	shard = make(map[string]int)
	per := make([]int, len(c.Shards))
	for i := 0; len(keys) < n*len(c.Shards); i++ {
		k := fmt.Sprintf("{k%d}", i)
		s := c.ShardOf(c.Slot(k))
		if per[s] < n {
			per[s]++
			keys = append(keys, k)
			shard[k] = s
		}
	}
	return keys, shard
}

// TestClusterFailover kills one primary of a six-node Cluster under load
// from two instances in each failure mode: the keys of the other primaries
// never see it (every answer normal, within its deadline); those of the
// dead primary's slots follow the mode, within their deadline, then answer
// normally again once its replica is promoted (measured from the kill and
// from the promotion); and the old primary, back empty as a replica,
// breaks nothing.
func TestClusterFailover(t *testing.T) {
	_, topo := redistest.StartClusterReplicas(t, clusterArgs...)
	insts := pairs(t, func() redis.Scripter { return topo.Client() },
		ratelimit.Policy{Limit: ratelimit.PerSecond(10000).WithBurst(10000)})
	keys, shard := clusterKeys(topo, 8)
	const victim = 0
	sh := topo.Shards[victim]
	l := startLoad(t, insts, func(inst, g, i int) string { return keys[(g*13+i)%len(keys)] })
	l.warm(t)

	down := time.Now()
	sh.Primary.Kill()
	var promoted time.Time
	calm := l.calm(down, func() {
		if promoted.IsZero() && sh.Replica.Role() == "master" {
			promoted = time.Now()
		}
	})
	assert.True(t, calm, "not every answer normal for %v within %v of the primary's death", calmFor, recoverWithin)
	require.False(t, promoted.IsZero(), "the replica %s was never promoted", sh.Replica.Addr)

	// The old primary comes back empty with its cluster configuration: the
	// cluster makes it a replica of the promoted one.
	rejoined := time.Now()
	sh.Primary.Restart()
	redistest.WaitReplica(t, sh.Primary, sh.Replica.Addr)
	time.Sleep(500 * time.Millisecond) // load on the rejoined topology
	answers := l.finish()

	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			o := check(t, of(answers, mode), down, func(k string) bool { return shard[k] == victim })
			assert.False(t, o.first.IsZero(), "no answer saw the primary down")
			assert.False(t, o.recovered.IsZero(), "no normal answer after the failure")
			assert.True(t, o.last.Before(rejoined), "an answer after the old primary came back as a replica was not normal: at %v, rejoined at %v",
				o.last.Format("15:04:05.000"), rejoined.Format("15:04:05.000"))
			assert.Less(t, o.recovered.Sub(promoted), followWithin, "from the promotion to normal answers")
			t.Logf("| Cluster | %s | outage seen %v | kill→promotion %v | kill→normal %v | promotion→normal %v | max latency %v |",
				mode, o.last.Sub(o.first).Round(time.Millisecond), promoted.Sub(down).Round(time.Millisecond),
				o.recovered.Sub(down).Round(time.Millisecond), o.recovered.Sub(promoted).Round(time.Millisecond),
				o.maxLatency.Round(time.Millisecond))
			t.Log(o)
		})
	}
}

// TestClusterFailoverReshard moves slots that hold loaded keys from one
// primary to another (redis-cli --cluster reshard: MIGRATE, so ASK while a
// slot moves and MOVED after) under load from two instances in each mode:
// every answer is normal, within its deadline.
func TestClusterFailoverReshard(t *testing.T) {
	_, topo := redistest.StartClusterReplicas(t, clusterArgs...)
	insts := pairs(t, func() redis.Scripter { return topo.Client() },
		ratelimit.Policy{Limit: ratelimit.PerSecond(10000).WithBurst(10000)})
	// reshard moves the source's first slots: 0 to moved-1 of shard 0.
	const moved = 300
	var keys []string
	for i := 0; len(keys) < 24; i++ {
		if k := fmt.Sprintf("{k%d}", i); topo.Slot(k) < moved {
			keys = append(keys, k)
		}
	}
	require.Equal(t, 0, topo.ShardOf(0))
	l := startLoad(t, insts, func(inst, g, i int) string { return keys[(g*7+i)%len(keys)] })
	l.warm(t)

	start := time.Now()
	out, err := exec.Command("redis-cli", "--cluster", "reshard", topo.Shards[0].Primary.Addr,
		"--cluster-from", topo.Shards[0].ID, "--cluster-to", topo.Shards[1].ID,
		"--cluster-slots", fmt.Sprint(moved), "--cluster-yes", "--cluster-pipeline", "10").CombinedOutput()
	require.NoError(t, err, "%s", out)
	took := time.Since(start)
	time.Sleep(300 * time.Millisecond) // load after the move
	answers := l.finish()

	owner, err := topo.Client().MasterForKey(context.Background(), keys[0])
	require.NoError(t, err)
	assert.Equal(t, topo.Shards[1].Primary.Addr, owner.Options().Addr, "the primary of slot %d, moved", topo.Slot(keys[0]))
	for _, mode := range modes {
		o := check(t, of(answers, mode), start, func(string) bool { return false })
		t.Logf("| Cluster | reshard | %s | %d slots moved in %v under load | %d answers, all normal | max latency %v |", mode, moved,
			took.Round(time.Millisecond), len(of(answers, mode)), o.maxLatency.Round(time.Millisecond))
	}
}

// clusterVictim returns the primary of shard i of topo as the victim of a
// loss test; shard says which shard each key lives on.
func clusterVictim(t *testing.T, topo *redistest.Cluster, i int, shard map[string]int) victim {
	sh := topo.Shards[i]
	return victim{
		client:   func() redis.Scripter { return topo.Client() },
		primary:  sh.Primary,
		replicas: []*redistest.Server{sh.Replica},
		owns:     func(k string) bool { return shard[k] == i },
		event:    "promotion",
		promoted: func() bool { return sh.Replica.Role() == "master" },
		rejoin: func() {
			// Back with its cluster configuration, the cluster makes it a
			// replica of the promoted one.
			sh.Primary.Restart()
			redistest.WaitReplica(t, sh.Primary, sh.Replica.Addr)
		},
	}
}

// TestClusterFailoverLoss measures what a failover of one primary of a
// Cluster loses, per key (see lagged and acknowledged, one primary each,
// in one cluster): the same as on Sentinel, on the dead primary's keys
// alone. The keys of the other primaries lose nothing and always answer
// normally. A Cluster's primaries have one replica each: WaitReplicas 1
// is all of them.
func TestClusterFailoverLoss(t *testing.T) {
	_, topo := redistest.StartClusterReplicas(t, clusterArgs...)
	keys, shard := clusterKeys(topo, 8)
	t.Run("lag", func(t *testing.T) {
		lagged(t, "Cluster", clusterVictim(t, topo, 0, shard), keys)
	})
	t.Run("acknowledged", func(t *testing.T) {
		acknowledged(t, "Cluster", clusterVictim(t, topo, 1, shard), keys, 1)
	})
}
