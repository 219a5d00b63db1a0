package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/failover"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// The loss tests count, per key, what a failover makes a service admit
// past its limit: the spends a primary acknowledged that the promoted
// replica never got. Redis replicates asynchronously, so what is lost is
// what the primary acknowledged within its replicas' lag before it died;
// on loopback the replicas never lag, so a test makes the lag itself
// (redistest's CutReplicas) and knows exactly what was lost. Every count
// is exact: the policy earns no token back during a test, every instance
// is in Closed mode, and each key is spent in Redis, by two instances
// taking turns, until it refuses.

const (
	// lossBurst is the burst of lossPolicy.
	lossBurst = 100
	// lossTimeout is the Stores' Options.Timeout: long enough for a loaded
	// machine.
	lossTimeout = time.Second
	// waitTimeout is the Options.Timeout of the Stores with WaitReplicas,
	// whose WAIT has 3/4 of it: on a loaded machine, a replica may not run
	// for most of a second, and a spend it did not acknowledge in time
	// would fail, its token spent.
	waitTimeout = 3 * time.Second
)

// lossPolicy earns one token back in six minutes: none during a test.
var lossPolicy = ratelimit.Policy{Limit: ratelimit.Per(10, time.Hour).WithBurst(lossBurst)}

// A victim is the primary that a loss test kills, and what the test needs
// of its topology. Its promotion is when the topology names a replica of
// it as the primary, so that clients can learn it: on Sentinel, the first
// Sentinel's switch-master; on a Cluster, the replica's taking the slots.
type victim struct {
	client   func() redis.Scripter // a new client of the topology, one per instance
	primary  *redistest.Server
	replicas []*redistest.Server
	owns     func(key string) bool // whether key lives on the victim; else on a primary that stays up
	promoted func() bool           // whether a replica of it has been promoted, polled
	event    string                // what the promotion is called, in the rows: "switch-master", "promotion"
	rejoin   func()                // restarts the dead victim, empty, as a replica of the promoted one
}

// A side is two instances of a service (Closed mode, one Prefix, one
// Store configuration) and what each key was admitted there, in each
// phase of a test.
type side struct {
	name                  string
	insts                 [2]*instance
	before, during, after map[string]int64
	latency               time.Duration // the mean of the spends of phase "before"
}

func newSide(t *testing.T, v victim, name string, opts redisstore.Options) *side {
	t.Helper()
	opts.Prefix = "loss:" + name + ":"
	s := &side{name: name, before: map[string]int64{}, during: map[string]int64{}, after: map[string]int64{}}
	for i := range s.insts {
		s.insts[i] = newInstance(t, v.client(), failover.Closed, opts, lossPolicy)
	}
	return s
}

// spent is what a side's spends of one key gave.
type spent struct {
	admitted int64 // allowed, by Redis or a lease (not Degraded)
	leased   int64 // of them, paid by a lease (Result.Until < 0)
	failed   int64 // answers other than normal: ErrStore, in Closed mode
	took     time.Duration
	err      error // the last failure's
}

// spend takes n tokens of key, one at a time, the instances taking turns.
func (s *side) spend(key string, n int64) spent { return s.take(key, n, false) }

// try takes n tokens of key as spend does, but stops at the first answer
// that is not normal, as a client that the service fails does: in Closed
// mode, while the failover.Store sends a probe to Redis now and then, and
// fails the other calls at once, the probes of a client that went on
// would each wait for their deadline.
func (s *side) try(key string, n int64) spent { return s.take(key, n, true) }

func (s *side) take(key string, n int64, stop bool) spent {
	var sp spent
	for i := range n {
		start := time.Now()
		res, err := s.insts[i%2].lim.Take(context.Background(), key, 1)
		sp.took += time.Since(start)
		switch {
		case err != nil || res.Degraded:
			sp.failed++
			sp.err = fmt.Errorf("at %s, after %v: %w", start.Format("15:04:05.000"), time.Since(start).Round(time.Millisecond), err)
			if stop {
				return sp
			}
		case res.Allowed:
			sp.admitted++
			if res.Until < 0 {
				sp.leased++
			}
		}
	}
	return sp
}

// each runs f on every key, each on a goroutine of its own, and returns
// what f returned for each. (So that the few calls that a failover.Store
// sends to a failing Redis, its probes, which may wait for a deadline,
// hold up none of the others.)
func each(keys []string, f func(key string) spent) map[string]spent {
	out := make(map[string]spent, len(keys))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			sp := f(k)
			mu.Lock()
			out[k] = sp
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// failures returns the keys of sps that had answers other than normal,
// with the last error of each.
func failures(sps map[string]spent) []string {
	var out []string
	for k, sp := range sps {
		if sp.failed > 0 {
			out = append(out, fmt.Sprintf("%s: %d, %v", k, sp.failed, sp.err))
		}
	}
	return out
}

// recovery is what a failover took, as the tests see it.
type recovery struct {
	down, promoted time.Time
	normal         []time.Time // per side: when the last of its keys answered normally
}

// since returns the time from the kill to v's promotion, for a row.
func (r recovery) since(v victim) string {
	return fmt.Sprintf("kill→%s %v", v.event, r.promoted.Sub(r.down).Round(time.Millisecond))
}

// killPrimary kills v's primary; runs outage, if not nil, at once; waits
// for a replica's promotion and brings the dead primary back as a replica
// of it (rejoin), as an orchestrator would; and waits until every instance
// of sides looks at every key normally (see instance). The looks, and the
// polls for the promotion, run on goroutines of their own meanwhile.
func killPrimary(t *testing.T, v victim, sides []*side, keys []string, outage func()) recovery {
	t.Helper()
	r := recovery{down: time.Now(), normal: make([]time.Time, len(sides))}
	v.primary.Kill()
	promoted := make(chan time.Time, 1)
	go func() {
		for !v.promoted() && time.Since(r.down) < recoverWithin {
			time.Sleep(10 * time.Millisecond)
		}
		promoted <- time.Now()
	}()
	errs := make([]error, len(sides))
	var wg sync.WaitGroup
	for i, s := range sides {
		wg.Go(func() { r.normal[i], errs[i] = s.recover(keys, r.down) })
	}
	if outage != nil {
		outage()
	}
	if r.promoted = <-promoted; r.promoted.Sub(r.down) >= recoverWithin {
		wg.Wait()
		t.Fatalf("no replica promoted within %v of the primary's death", recoverWithin)
	}
	v.rejoin()
	wg.Wait()
	for i, s := range sides {
		require.False(t, r.normal[i].IsZero(), "side %s: keys still not answered normally %v after the primary's death (promoted after %v): %v",
			s.name, recoverWithin, r.promoted.Sub(r.down).Round(time.Millisecond), errs[i])
	}
	return r
}

// recover looks at every key from every instance of s until each has had
// a normal answer, and returns when the last came, or the zero time and
// the last error if that took past recoverWithin from down.
func (s *side) recover(keys []string, down time.Time) (time.Time, error) {
	var last time.Time
	var lastErr error
	for _, in := range s.insts {
		pending := append([]string(nil), keys...)
		for len(pending) > 0 {
			if time.Since(down) > recoverWithin {
				return time.Time{}, fmt.Errorf("%d keys pending, such as %q: %w", len(pending), pending[0], lastErr)
			}
			rest := pending[:0]
			for _, k := range pending {
				res, err := in.look.Take(context.Background(), k, 0)
				if err != nil || res.Degraded {
					lastErr = err
					rest = append(rest, k)
				}
			}
			pending = rest
			if len(pending) > 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		last = time.Now()
	}
	return last, nil
}

// overAdmitted returns, per key, what s admitted past lossBurst in all.
func (s *side) overAdmitted(keys []string) map[string]int64 {
	over := make(map[string]int64, len(keys))
	for _, k := range keys {
		over[k] = s.before[k] + s.during[k] + s.after[k] - lossBurst
	}
	return over
}

// record sets each key's admitted of sps into m.
func record(m map[string]int64, sps map[string]spent) {
	for k, sp := range sps {
		m[k] = sp.admitted
	}
}

// lagged spends keys on two sides, one with the default Options, the
// other with WaitReplicas 1, in two phases: first with the victim's
// replicas in sync (half the burst of every other key, nothing of the
// rest: "fresh" keys), then with its replicas cut off (the rest of each
// burst); kills the victim; and once a replica is promoted spends every
// key until it refuses. It asserts what each side admitted past the burst,
// per key:
//
//   - with the default Options, on the victim, exactly the spends it
//     acknowledged while its replicas lagged: the whole burst of a fresh
//     key, half of the others';
//   - with WaitReplicas 1, nothing: the spends during the lag failed, as
//     Closed mode says, for want of a replica's acknowledgement;
//   - on the primaries that stayed up, nothing, on either side, every
//     answer normal.
//
// The side with the default Options answers normally again within
// followWithin of the promotion; the other needs a replica of the new
// primary, once the Sentinels reconfigure one or the dead primary
// rejoins.
func lagged(t *testing.T, topology string, v victim, keys []string) {
	t.Helper()
	async := newSide(t, v, "async", redisstore.Options{Timeout: lossTimeout})
	wait := newSide(t, v, "wait", redisstore.Options{Timeout: waitTimeout, WaitReplicas: 1})
	sides := []*side{async, wait}
	odd := alternate(keys, v.owns)
	first := func(k string) int64 { // what key is spent while the replicas are in sync; 0: a fresh key
		if odd[k] {
			return lossBurst / 2
		}
		return 0
	}

	for _, s := range sides {
		sps := each(keys, func(k string) spent { return s.spend(k, first(k)) })
		require.Empty(t, failures(sps), "side %s, replicas in sync", s.name)
		record(s.before, sps)
		var took time.Duration
		var n int64
		for k, sp := range sps {
			require.Equal(t, first(k), sp.admitted, "side %s, key %q, replicas in sync: admitted", s.name, k)
			took, n = took+sp.took, n+sp.admitted
		}
		s.latency = took / time.Duration(max(n, 1))
	}
	v.primary.WaitSynced(v.replicas...)
	v.primary.CutReplicas()
	for _, s := range sides {
		record(s.during, each(keys, func(k string) spent { return s.try(k, lossBurst-first(k)) }))
	}
	for _, k := range keys {
		switch {
		case !v.owns(k):
			assert.Equal(t, lossBurst-first(k), wait.during[k], "key %q of a healthy primary, WaitReplicas 1, replicas of the victim cut off: admitted", k)
		default:
			assert.Zero(t, wait.during[k], "key %q, WaitReplicas 1, replicas cut off: admitted", k)
		}
		assert.Equal(t, lossBurst-first(k), async.during[k], "key %q, replicas of the victim cut off: admitted", k)
	}

	r := killPrimary(t, v, sides, keys, nil)
	assert.Less(t, r.normal[0].Sub(r.promoted), followWithin, "default Options: from the promotion to every key answered normally")
	for _, s := range sides {
		sps := each(keys, func(k string) spent { return s.spend(k, lossBurst+10) })
		assert.Empty(t, failures(sps), "side %s, after the failover", s.name)
		record(s.after, sps)
	}

	overAsync, overWait := async.overAdmitted(keys), wait.overAdmitted(keys)
	var fresh, half int64 // the most a fresh key, or another, was over-admitted on the victim
	for _, k := range keys {
		if !v.owns(k) {
			assert.Zero(t, overAsync[k], "key %q of a healthy primary, default Options: admitted past the burst", k)
		} else {
			assert.Equal(t, async.during[k], overAsync[k], "key %q, default Options: admitted past the burst, want what was acknowledged during the lag", k)
			if first(k) == 0 {
				fresh = max(fresh, overAsync[k])
			} else {
				half = max(half, overAsync[k])
			}
		}
		assert.Zero(t, overWait[k], "key %q, WaitReplicas 1: admitted past the burst", k)
	}
	t.Logf("| %s | lag | over-admission per key, default Options: %d for a key spent only during the lag, %d for one half spent before; WaitReplicas 1: %d | %s | %s→normal: default %v, WaitReplicas 1 %v (once the new primary has a replica in sync) | spend latency: default %v, WaitReplicas 1 %v |",
		topology, fresh, half, maxOf(overWait), r.since(v), v.event,
		r.normal[0].Sub(r.promoted).Round(time.Millisecond), r.normal[1].Sub(r.promoted).Round(time.Millisecond),
		async.latency.Round(time.Microsecond), wait.latency.Round(time.Microsecond))
}

// acknowledged spends keys from two instances that wait for replicas
// (Options.WaitReplicas) and lease tokens (Options.Lease, long enough to
// outlast the test), with their refusal caches: every other key two
// thirds of its burst, each instance leasing ("leased" keys), the others
// the whole burst and then refusals, which the caches keep ("spent" keys).
// It kills the victim right after the last spend was acknowledged; takes
// every key again at once, during the outage, when the leases pay for
// some and the caches refuse others; and once a replica is promoted,
// spends every key until it refuses. It asserts that every key admitted
// exactly its burst, in all: nothing that a replica acknowledged was lost,
// the leases that the old primary granted were accounted for in the new
// one, and a refusal it taught the caches admitted nothing.
func acknowledged(t *testing.T, topology string, v victim, keys []string, replicas int) {
	t.Helper()
	s := newSide(t, v, "ack", redisstore.Options{Timeout: waitTimeout, WaitReplicas: replicas, Lease: 20 * time.Second})
	odd := alternate(keys, v.owns)
	leased := func(k string) bool { return !odd[k] }
	sps := each(keys, func(k string) spent {
		if leased(k) {
			return s.spend(k, 2*lossBurst/3)
		}
		return s.spend(k, 2*lossBurst)
	})
	require.Empty(t, failures(sps), "before the failover")
	record(s.before, sps)
	var leases int64
	for k, sp := range sps {
		want := int64(lossBurst)
		if leased(k) {
			want = 2 * lossBurst / 3
		}
		require.Equal(t, want, sp.admitted, "key %q, before the failover: admitted", k)
		leases += sp.leased
	}
	require.Positive(t, leases, "admissions paid by leases before the failover")

	var outage map[string]spent
	r := killPrimary(t, v, []*side{s}, keys, func() {
		outage = each(keys, func(k string) spent { return s.spend(k, 4) })
	})
	record(s.during, outage)
	var paid int64
	for k, sp := range outage {
		switch {
		case !v.owns(k):
			assert.Zero(t, sp.failed, "key %q of a healthy primary, during the outage: answers not normal (%v)", k, sp.err)
		case !leased(k):
			assert.Zero(t, sp.admitted, "key %q, spent, during the outage: admitted", k)
		default:
			assert.Equal(t, sp.leased, sp.admitted, "key %q, during the outage: admitted other than by a lease", k)
		}
		if v.owns(k) {
			paid += sp.leased
		}
	}
	assert.Positive(t, paid, "admissions paid by leases during the outage")

	sps = each(keys, func(k string) spent { return s.spend(k, lossBurst+10) })
	assert.Empty(t, failures(sps), "after the failover")
	record(s.after, sps)
	over := s.overAdmitted(keys)
	for _, k := range keys {
		assert.Zero(t, over[k], "key %q: admitted past its burst (before %d, during the outage %d, after %d)", k, s.before[k], s.during[k], s.after[k])
	}
	t.Logf("| %s | acknowledged | WaitReplicas %d, leases, refusal caches: over-admission per key %d, under-admission %d | admitted from leases during the outage: %d | %s | %s→normal %v (once the new primary has WaitReplicas in sync) |",
		topology, replicas, maxOf(over), -minOf(over), paid, r.since(v), v.event,
		r.normal[0].Sub(r.promoted).Round(time.Millisecond))
}

// alternate returns every other key of keys, apart among the keys that
// owns reports true for and the others, so that each half of a test's
// keys is found on the victim and on the healthy primaries alike.
func alternate(keys []string, owns func(key string) bool) map[string]bool {
	odd := make(map[string]bool, len(keys))
	var n [2]int
	for _, k := range keys {
		g := 0
		if owns(k) {
			g = 1
		}
		odd[k] = n[g]%2 == 1
		n[g]++
	}
	return odd
}

func maxOf(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n = max(n, v)
	}
	return n
}

func minOf(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n = min(n, v)
	}
	return n
}
