package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// TestSentinelFailover kills the primary of a Sentinel topology under load
// from two instances in each failure mode: while it is down every answer
// follows the mode, within its deadline; the stores follow the promotion by
// themselves and answer normally again within followWithin of the first
// Sentinel's switch-master (measured from the kill, from the replica's
// promotion and from the switch-master), NOSCRIPT on the new primary
// never surfacing; and the old primary, back empty as a replica, breaks
// nothing.
func TestSentinelFailover(t *testing.T) {
	_, topo := redistest.StartSentinel(t)
	old := topo.Primary.Addr
	addr, err := topo.MasterAddr(context.Background())
	require.NoError(t, err)
	require.Equal(t, old, addr)
	insts := pairs(t, func() redis.Scripter { return topo.Client() },
		ratelimit.Policy{Limit: ratelimit.PerSecond(10000).WithBurst(10000)})
	l := startLoad(t, insts, func(inst, g, i int) string { return fmt.Sprintf("k%d", (g*7+i)%32) })
	l.warm(t)

	down := time.Now()
	topo.Primary.Kill()
	var promotion, switched time.Time // a replica's ROLE says master; a Sentinel names it
	var promoted string
	calm := l.calm(down, func() {
		for _, r := range topo.Replicas {
			if promotion.IsZero() && r.Role() == "master" {
				promotion = time.Now()
			}
		}
		if switched.IsZero() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			if promoted = topo.Switched(ctx, old); promoted != "" {
				switched = time.Now()
			}
			cancel()
		}
	})
	assert.True(t, calm, "not every answer normal for %v within %v of the primary's death", calmFor, recoverWithin)
	require.False(t, switched.IsZero(), "the Sentinels never switched the master")
	require.False(t, promotion.IsZero(), "no replica was seen promoted")
	newPrimary := topo.Server(promoted)
	require.NotNil(t, newPrimary, "promoted %s", promoted)

	// The old primary comes back empty, as a replica of the new one: the
	// stores go on answering normally (no READONLY).
	rejoined := time.Now()
	topo.Primary.RestartAsReplica(promoted)
	redistest.WaitReplica(t, topo.Primary, promoted)
	time.Sleep(500 * time.Millisecond) // load on the rejoined topology
	answers := l.finish()

	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			o := check(t, of(answers, mode), down, func(string) bool { return true })
			assert.False(t, o.first.IsZero(), "no answer saw the primary down")
			assert.False(t, o.recovered.IsZero(), "no normal answer after the failure")
			assert.True(t, o.last.Before(rejoined), "an answer after the old primary came back as a replica was not normal: at %v, rejoined at %v",
				o.last.Format("15:04:05.000"), rejoined.Format("15:04:05.000"))
			assert.Less(t, o.recovered.Sub(switched), followWithin, "from the switch-master to normal answers")
			t.Logf("| Sentinel | %s | outage seen %v | kill→promotion %v | promotion→normal %v (promotion→switch-master %v, switch-master→normal %v) | max latency %v |",
				mode, o.last.Sub(o.first).Round(time.Millisecond), promotion.Sub(down).Round(time.Millisecond),
				o.recovered.Sub(promotion).Round(time.Millisecond), switched.Sub(promotion).Round(time.Millisecond),
				o.recovered.Sub(switched).Round(time.Millisecond), o.maxLatency.Round(time.Millisecond))
			t.Log(o)
		})
	}

	// The new primary, a replica until then, had no script: the stores met
	// NOSCRIPT there and loaded it by EVAL, without an error.
	pc := newPrimary.Client()
	evals, evalshas := redistest.Commands(t, pc, "eval"), redistest.Commands(t, pc, "evalsha")
	assert.Positive(t, evals, "EVAL on the new primary, after NOSCRIPT")
	t.Logf("new primary %s: %d EVAL, %d EVALSHA", promoted, evals, evalshas)
}

// sentinelVictim returns the primary of topo as the victim of a loss test:
// every key lives on it.
func sentinelVictim(t *testing.T, topo *redistest.Sentinel) victim {
	old := topo.Primary
	var promoted string
	return victim{
		client:   func() redis.Scripter { return topo.Client() },
		primary:  old,
		replicas: topo.Replicas,
		owns:     func(string) bool { return true },
		event:    "switch-master",
		promoted: func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			promoted = topo.Switched(ctx, old.Addr)
			return promoted != ""
		},
		rejoin: func() {
			old.RestartAsReplica(promoted)
			redistest.WaitReplica(t, old, promoted)
		},
	}
}

// sentinelKeys are the keys of the Sentinel loss tests.
func sentinelKeys() []string {
	keys := make([]string, 32)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	return keys
}

// TestSentinelFailoverLoss measures what a failover of a Sentinel topology
// loses, per key: with the default Options, the spends the primary
// acknowledged while its replicas lagged; with WaitReplicas, nothing, with
// the replicas lagging (the spends fail, in Closed mode) or not (the
// primary dies right after acknowledged spends, which leases and refusal
// caches outlive). See lagged and acknowledged. WaitReplicas is 2 when the
// primary dies right after acknowledged spends: with 1, the Sentinels
// might promote the replica that did not acknowledge the last of them
// (they pick the replica with the largest offset they know of, which
// they learn once a second).
func TestSentinelFailoverLoss(t *testing.T) {
	t.Run("lag", func(t *testing.T) {
		_, topo := redistest.StartSentinel(t)
		lagged(t, "Sentinel", sentinelVictim(t, topo), sentinelKeys())
	})
	t.Run("acknowledged", func(t *testing.T) {
		_, topo := redistest.StartSentinel(t)
		acknowledged(t, "Sentinel", sentinelVictim(t, topo), sentinelKeys(), len(topo.Replicas))
	})
}
