// Package redisstore is a [ratelimit.Store] in Redis, so that many instances
// of a service enforce one quota together.
//
// A decision is one round trip at most: an embedded Lua script reads the
// bucket's state, decides and writes it back atomically, on the Redis
// server's clock (TIME). Concurrent decisions share round trips; a request
// that the store's last answer already refuses is refused without one (the
// refusal cache); with Options.Lease, a busy key's tokens are taken several
// at a time and spent locally. None of these ever admits a request that
// one exact shared bucket would refuse.
//
// A key expires when its bucket is full again, so nothing leaks. A call
// touches one key, or several in one Cluster slot (TakeAll), so the store
// works on a single server, Sentinel, Cluster and Ring. Keys are
// PREFIX + POLICY + ":" + KEY, a KEY longer than 128 bytes replaced by its
// SHA-256. A key that holds something else than a state fails its own
// decisions with an error wrapping ratelimit.ErrStore that names the
// policy; a failover.Store does not count it as the primary failing.
//
// Every call has a deadline (Options.Timeout), and a refused dial fails the
// calls in flight at once, with its error. Combine the store with a
// [github.com/tokenfair/ratelimit/failover.Store] to choose what happens
// while Redis is unavailable. docs/stores.md tells more.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenfair/ratelimit"
)

// Store is a [ratelimit.Store] in Redis, also a [ratelimit.BatchStore],
// [ratelimit.RefundStore], [ratelimit.ResetStore] and [ratelimit.SlotStore].
// It is safe for concurrent use.
type Store struct {
	client   redis.Scripter
	proc     processor // client, when it has Process and Pipeline
	prefix   string
	timeout  time.Duration
	now      func() time.Time // nil: the Redis server's clock
	batching bool
	batch    batcher
	dials    *dialWatch   // on a *redis.Client: fails calls at once when a dial fails
	seed     maphash.Seed // of the fingerprints the refusal cache and the leases know keys by
	refusals *refusals    // nil with Options.NoRefusalCache
	leases   *leases      // nil without Options.Lease
	nodes    *nodes       // on a ClusterClient: a batcher per primary, the slot map's reloads
	replicas int64        // Options.WaitReplicas
}

// processor is what every go-redis client (Client, ClusterClient, Ring,
// Conn) has beyond redis.Scripter: the store sends its own commands, and
// pipelines of them, through it.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
}

var (
	_ ratelimit.BatchStore = (*Store)(nil)
	_ ratelimit.SlotStore  = (*Store)(nil)
)

// Options configures a [Store]. The zero value, or a nil *Options, gives
// each field its default.
type Options struct {
	// Prefix starts the name of every key; give each application sharing
	// a Redis its own. Default: "ratelimit:".
	Prefix string
	// Timeout is the deadline of every call, on top of the context's.
	// Default: 100 ms.
	Timeout time.Duration
	// Clock, for tests, makes the script decide at the time Clock returns
	// (never before 1970) instead of the Redis server's; keys are then kept
	// 10 s longer, in case Clock runs behind Redis. Default: nil, the
	// server's TIME.
	Clock func() time.Time
	// NoBatching sends every decision in a round trip of its own. By
	// default, the decisions that arrive while a round trip is in flight
	// leave together in the next (a lone decision is sent at once), each
	// keeping its own deadline and result. Default: false.
	NoBatching bool
	// NoRefusalCache makes every decision ask Redis. By default, a request
	// that the last answer for its bucket already refuses is refused
	// locally, for a second at most; that never admits anything, but may
	// miss tokens that another instance gave back meanwhile. Default: false.
	NoRefusalCache bool
	// Lease lets a busy key take several tokens from Redis in one decision
	// and spend them locally for at most Lease. The shared bucket never
	// refills into leased tokens, so nothing is admitted that it would
	// refuse; what leases cost is tokens idle in one instance while another
	// is refused, and results that show this instance's view. LeakyShape
	// policies and penalty boxes never lease. Give every instance sharing a
	// Prefix the same Lease. Default: 0, no leases; 20 to 100 ms suits most
	// services; at most 1 minute, in whole milliseconds.
	Lease time.Duration
	// WaitReplicas, if set, makes every decision wait until that many
	// replicas have its writes (Redis WAIT, in the same round trip, within
	// Timeout), so that a primary's death loses none of them when Sentinel
	// or the Cluster promotes a replica that has them; a decision not
	// acknowledged in time fails with ratelimit.ErrStore (a failover.Store
	// applies its Mode), its tokens spent. Without it, a failover gives
	// back to each key the tokens that the dead primary granted within its
	// replicas' lag, which may be the whole burst. Only a WaitReplicas of
	// every replica of a primary makes sure the promoted one has every
	// write; decisions then fail while one is missing, also after a
	// failover until enough replicas serve the new primary. A network
	// partition can still lose writes, as Redis documents. It costs the
	// replicas' acknowledgement on every round trip, no round trip more.
	// Only on a *redis.Client (a Sentinel failover client is one) or a
	// *redis.ClusterClient. Default: 0, no wait.
	WaitReplicas int
	// SkipContextTimeoutCheck lets New accept a client created without
	// ContextTimeoutEnabled, on which a hung Redis holds a call for the
	// client's ReadTimeout. Default: false.
	SkipContextTimeoutCheck bool
}

// New returns a Store that keeps its buckets in Redis through client (a
// *redis.Client, also a failover client for Sentinel, a
// *redis.ClusterClient, a *redis.Ring or any redis.Scripter), configured by
// opts (nil for the defaults), or an error naming the field at fault. New
// does no I/O. It refuses a go-redis client created without
// ContextTimeoutEnabled, which would let a call outlive its deadline. To a
// *redis.Client it adds a hook, for the client's life, that watches dials:
// make one Store per client and share it.
func New(client redis.Scripter, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	switch {
	case client == nil:
		return nil, errors.New("redisstore: New: nil client")
	case o.Lease < 0 || o.Lease > time.Minute || o.Lease%time.Millisecond != 0:
		return nil, fmt.Errorf("redisstore: Options.Lease %v: want whole milliseconds up to 1m, or 0 for no leases", o.Lease)
	case o.WaitReplicas < 0:
		return nil, fmt.Errorf("redisstore: Options.WaitReplicas %d: want a count of replicas, or 0 for none", o.WaitReplicas)
	case o.WaitReplicas > 0 && !waitable(client):
		return nil, fmt.Errorf("redisstore: Options.WaitReplicas %d: the %T cannot say which primary ran a write; use a *redis.Client or a *redis.ClusterClient", o.WaitReplicas, client)
	case o.Timeout < 0:
		return nil, fmt.Errorf("redisstore: Options.Timeout %v: want a positive timeout, or 0 for 100ms", o.Timeout)
	case !o.SkipContextTimeoutCheck && !contextTimeoutEnabled(client):
		return nil, fmt.Errorf("redisstore: New: the %T was created without ContextTimeoutEnabled, so deadlines would not cut socket reads short; set it, or set Options.SkipContextTimeoutCheck", client)
	}
	if o.Prefix == "" {
		o.Prefix = "ratelimit:"
	}
	if o.Timeout == 0 {
		o.Timeout = 100 * time.Millisecond
	}
	s := &Store{client: client, prefix: o.Prefix, timeout: o.Timeout, now: o.Clock, batching: !o.NoBatching, seed: maphash.MakeSeed()}
	local := localClock(o.Clock)
	if !o.NoRefusalCache {
		s.refusals = newRefusals(local, o.Lease)
	}
	if o.Lease > 0 {
		s.leases = newLeases(int64(o.Lease), local)
	}
	s.proc, _ = client.(processor)
	s.replicas = int64(o.WaitReplicas)
	if cc, ok := client.(*redis.ClusterClient); ok {
		s.nodes = &nodes{client: cc, batchers: make(map[string]*batcher)}
	}
	s.dials = watchDials(client)
	if s.dials != nil && s.batching {
		s.dials.queue = &s.batch
	}
	return s, nil
}

// waitable reports whether the writes of client can be followed by a WAIT
// on the primary that ran them.
func waitable(c redis.Scripter) bool {
	switch c.(type) {
	case *redis.Client, *redis.ClusterClient:
		return true
	}
	return false
}

// contextTimeoutEnabled reports whether a client of a known type honours
// context deadlines on socket reads; it assumes other Scripters do.
func contextTimeoutEnabled(c redis.Scripter) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}
