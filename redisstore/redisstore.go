// Package redisstore is a [ratelimit.Store] in Redis, so that many instances
// of a service enforce one quota together.
//
// Every decision is at most one round trip: an embedded Lua script that
// reads the bucket's state, decides and writes it back atomically, run with
// EVALSHA (and EVAL when the server does not have the script yet). A key
// whose last answer left it no token is refused locally, without a round
// trip, while that answer alone refuses the request (the refusal cache,
// Options.NoRefusalCache: it never admits anything). With Options.Lease, a
// busy key takes several tokens in one decision and spends them locally
// until the lease ends, and the script keeps the bucket from refilling into
// the room of tokens leased, so that nothing is ever admitted that one
// exact bucket would refuse (docs/stores.md explains how). With
// Options.Batching, concurrent decisions share round trips and script calls,
// so there are fewer of both than decisions. The script reads the Redis
// server's clock (TIME), so the clocks of the application's hosts never
// matter. A key's state is one time, the moment its bucket is full again
// (or its queue empty); the key expires then, so Redis holds only keys that
// carry information and nothing leaks. A call touches one key, or
// several in one Cluster slot (TakeAll), so the store works on Redis
// Cluster as well as on a single server, Sentinel (a failover client) or a
// Ring.
//
// Every call has a deadline (Options.Timeout, 100 ms by default). go-redis
// v9 only honours a context's deadline on socket reads when the client was
// created with ContextTimeoutEnabled: true; New refuses clients that do not
// have it (Options.SkipContextTimeoutCheck overrides), because without it a
// paused Redis would hold every request for the client's read timeout, 3 s
// by default. Combine the store with a
// [github.com/tokenfair/ratelimit/failover.Store] to choose what
// happens while Redis is unavailable.
//
// A Redis that cannot be reached at all fails a call at once, with the
// cause: the error of a call through a *redis.Client (standalone, or a
// failover client) whose connection is refused, or whose host name does not
// resolve, is the dial's error (it wraps syscall.ECONNREFUSED, or a
// *net.DNSError), within milliseconds. go-redis dials on a goroutine of its
// own and retries a failed dial (Options.DialerRetries, 5 times, 100 ms
// apart), and the command waiting for the connection would learn nothing
// until its deadline, then report only "context deadline exceeded"; so New
// adds a hook to a *redis.Client that sees every dial, and a dial that says
// the server is not there (refused, or a name that does not exist) ends the
// store's calls in flight with its error. Other dial failures, such as a
// local shortage of file descriptors or ports, or a timeout, are left to
// go-redis's retries and end no call. A wrong password is
// Redis's own error (WRONGPASS), at once, on any client. On a
// *redis.ClusterClient or a *redis.Ring, which dial many servers, New adds
// no hook, and a refused node may cost a call its deadline: DialerRetries: 1
// and MaxRetries: -1 in the client's options shorten that.
//
// Keys are PREFIX + POLICY + ":" + KEY, with the prefix "ratelimit:" by
// default. Policy names never contain ":", so no two policies' keys collide.
// A KEY longer than 128 bytes is replaced by "#" and its SHA-256 (after its
// hash tag, if it has one), so Redis never holds a long key, or a secret
// that a custom key function forgot to hash. A key under the prefix that
// holds something else than a state (a key of another type, a string that
// does not parse, as another application sharing the prefix may write)
// fails its own decisions with an error wrapping [storeerr.ErrKeyState],
// which names the policy and the keyed hash of the key (the process's,
// ratelimit.Event.KeyHash), never the key; the other keys are decided.
package redisstore

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
	"github.com/tokenfair/ratelimit/internal/keyhash"
	"github.com/tokenfair/ratelimit/internal/storeerr"
)

var (
	//go:embed take.lua
	takeSource string
	takeScript = redis.NewScript(takeSource)

	//go:embed slots.lua
	slotsSource string
	slotsScript = redis.NewScript(slotsSource)

	releaseScript = redis.NewScript(`return redis.call("ZREM", KEYS[1], ARGV[1])`)
)

// Store is a [ratelimit.Store] in Redis. It is safe for concurrent use.
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

// Options configures a [Store]. Every field is optional: the zero value,
// or a nil *Options, is the documented default of each.
type Options struct {
	// Prefix starts the name of every key. Give each application sharing
	// a Redis its own prefix. Default: "ratelimit:".
	Prefix string
	// Timeout is the deadline of every call, on top of any deadline the
	// caller's context carries. Default: 100 ms.
	Timeout time.Duration
	// Clock makes the script decide at the time Clock returns instead of
	// the Redis server's time. It exists for tests that need exact,
	// repeatable decisions; production code should leave it nil, since
	// instances' clocks differ. It must not return a time before 1970.
	// Redis still expires keys on its own clock, so with a Clock every
	// key is kept 10 s longer than its state matters, in case Clock runs
	// behind Redis; that changes no decision.
	// Default: nil, the Redis server's clock (TIME).
	Clock func() time.Time
	// Batching lets concurrent decisions share round trips: the decisions
	// that arrive while one of the store's round trips is in flight wait
	// for it to end and then go together in the next, on a *redis.Client
	// in one script call that decides each of them on its own (so Redis
	// pays a script call's fixed cost, much of a decision's, once for
	// all), on a *redis.ClusterClient in one script call per slot, on a
	// *redis.Ring in one script call each; several script calls go in one
	// pipeline. A decision that finds nothing in flight is sent at once;
	// one that queues waits for the round trip ahead of it, so a decision
	// takes at most two round trips. Each decision keeps its own deadline,
	// and its own result or error. Other Scripters than go-redis's clients
	// send every decision alone. TakeAll batches too; Acquire and Release
	// never do. Default: false, every decision goes alone.
	Batching bool
	// NoRefusalCache turns the refusal cache off, so that every decision
	// asks Redis. The cache keeps, for the keys whose last answer left no
	// token (at most 16 384 of them), the time their bucket is full again
	// at the earliest, and refuses locally, without a round trip, the
	// requests that this bound alone refuses: the same refusal Redis would
	// give, with a RetryAfter that may be earlier than Redis's, never later.
	// An entry answers for a second at most, then Redis is asked again (so
	// that a Reset on another instance is seen within a second). With
	// Lease, a penalty box's answer "not banned" is kept for the lease time.
	// It never admits a request. Its one inexactness: tokens given back by
	// another instance (a response that does not count, a multi-policy
	// refusal's refund) may make room before the bound says so, until the
	// next answer from Redis. Default: false, the cache is on.
	NoRefusalCache bool
	// Lease lets the store take several tokens of a busy key from Redis in
	// one decision and spend them locally, one request at a time, for at
	// most Lease: a token lease. Everything admitted was taken from the
	// shared bucket first, and the script keeps the bucket from refilling
	// into the room of tokens leased and not yet spent, so across any
	// number of instances nothing is ever admitted that one exact bucket
	// would refuse. What leases cost is under-admission: tokens idle in
	// one instance's lease while another instance's client is refused
	// (BENCHMARKS.md measures it, docs/stores.md explains it). A key seen once takes its cost, as
	// without leases; a key's leases grow with its local rate up to an
	// eighth of the burst. What is left of a lease when it ends is given
	// back with the key's next decision. TokenBucket and LeakyPolice
	// policies lease; LeakyShape never does, since its queue's order is
	// kept in Redis, nor do a penalty box's buckets. A Limiter of several
	// policies then takes them one at a time (TakeAll reports
	// ErrNotAtomic), each from its lease, and gives back what a refusal by
	// one left spent in the others. While a key has a lease, its results
	// (Remaining, ResetAfter, and so the RateLimit header field) are this
	// instance's view, the lease counted as still in the bucket: they may
	// miss what other requests took from Redis meanwhile. Give every instance
	// sharing a Prefix the same Lease. Default: 0, no leases; 20 ms to
	// 100 ms suits most services, and well under a policy's burst ÷ rate;
	// at most 1 minute, in whole milliseconds.
	Lease time.Duration
	// SkipContextTimeoutCheck lets New accept a client created without
	// ContextTimeoutEnabled. Calls then still carry a deadline, but
	// go-redis does not apply it to socket reads: a hung Redis holds
	// requests for the client's ReadTimeout. Default: false, New refuses
	// such a client.
	SkipContextTimeoutCheck bool
}

// New returns a Store that keeps its buckets in Redis through client: a
// *redis.Client (standalone, or a failover client for Sentinel), a
// *redis.ClusterClient, a *redis.Ring, or any redis.Scripter, configured by
// opts (nil for the defaults). It returns an error naming the field at
// fault. New does no I/O; to a *redis.Client it adds a hook (see the
// package documentation) that passes every dial and command through
// unchanged.
//
// go-redis cannot remove a hook, so every New on a *redis.Client adds one
// for the client's life, and each dial passes through all of them. Make
// one Store per client, when the application starts, and share it: a Store
// is safe for concurrent use, and its options (Prefix, Timeout, Batching)
// are fixed, so there is no reason for a Store per request. Several
// Stores on one client each fail fast.
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
	s := &Store{client: client, prefix: o.Prefix, timeout: o.Timeout, now: o.Clock, batching: o.Batching, seed: maphash.MakeSeed()}
	local := localClock(o.Clock)
	if !o.NoRefusalCache {
		s.refusals = newRefusals(local, o.Lease)
	}
	if o.Lease > 0 {
		s.leases = newLeases(int64(o.Lease), local)
	}
	s.proc, _ = client.(processor)
	s.dials = watchDials(client)
	s.batch.dials = s.dials
	return s, nil
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

// Take implements [ratelimit.Store] in one round trip, or none when the
// key's lease answers or the refusal cache already refuses the request.
func (s *Store) Take(ctx context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	leased := s.leases != nil && leasable(p)
	if !leased && s.refusals == nil {
		return s.takeOne(ctx, 0, p, key, cost)
	}
	fp := fingerprint(s.seed, p.Name, key)
	asks := cost > 0 || cost == 0 && p.Algorithm == algo.Ban // what the refusal cache may refuse
	if leased {
		// The key's lease answers, without a round trip: a request it
		// pays for, a look at the bucket (cost 0), tokens given back.
		var res ratelimit.Result
		var ok, held bool
		if res, ok, held = s.leases.spend(fp, p, cost); ok {
			return res, nil
		}
		// A lease that ended or cannot pay goes back with this request
		// (takeLeased): the refusal cache counts its tokens as spent.
		asks = asks && !held
	}
	if s.refusals != nil && asks {
		if res, ok := s.refusals.refuse(fp, p, cost); ok {
			return res, nil
		}
	}
	if leased && cost > 0 {
		return s.takeLeased(ctx, fp, p, key, cost)
	}
	return s.takeOne(ctx, fp, p, key, cost)
}

// leasable reports whether p's tokens may be leased: those of a token
// bucket or a leaky bucket policing, but not a penalty box's (whose names
// have a "/"), whose strikes must be counted where every instance sees
// them.
func leasable(p *ratelimit.Policy) bool {
	return (p.Algorithm == ratelimit.TokenBucket || p.Algorithm == ratelimit.LeakyPolice) && !strings.Contains(p.Name, "/")
}

// takeOne decides a request in Redis, without a lease.
func (s *Store) takeOne(ctx context.Context, fp uint64, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	var res [1]ratelimit.Result
	fps := [1]uint64{fp}
	if err := s.take(ctx, []ratelimit.BatchItem{{Policy: p, Key: key, Cost: cost}}, res[:], fps[:]); err != nil {
		return ratelimit.Result{}, err
	}
	return res[0], nil
}

// TakeAll implements [ratelimit.BatchStore] in one round trip, or none when
// the refusal cache already refuses one of the requests (the results of the
// others then come from what the cache knows of them, which may show more
// tokens than they have). On a *redis.ClusterClient the keys must hash to
// one slot (give per-client keys a hash tag such as "{client-42}"; a Global
// policy's key is in a slot of its own); on a *redis.Ring they never are
// known to share a shard. In those cases TakeAll returns
// ratelimit.ErrNotAtomic and the Limiter takes the policies one at a time,
// giving back what a refusal left spent. With Options.Lease, TakeAll
// returns ratelimit.ErrNotAtomic too when a request's policy may lease, so
// that the Limiter takes each policy on its own, from its lease when it has
// one.
func (s *Store) TakeAll(ctx context.Context, reqs []ratelimit.BatchItem, results []ratelimit.Result) error {
	if !s.oneNode(reqs) || s.leases != nil && slices.ContainsFunc(reqs, func(r ratelimit.BatchItem) bool { return leasable(r.Policy) }) {
		return ratelimit.ErrNotAtomic
	}
	if s.refusals == nil {
		return s.run(ctx, reqs, results)
	}
	var buf [4]uint64
	fps := buf[:0]
	for _, r := range reqs {
		fps = append(fps, fingerprint(s.seed, r.Policy.Name, r.Key))
	}
	if s.refusals.refuseAll(fps, reqs, results) {
		return nil
	}
	return s.take(ctx, reqs, results, fps)
}

// take runs reqs in Redis and keeps what the answers say in the refusal
// cache; fps are the fingerprints of reqs' buckets (unused without the
// cache).
func (s *Store) take(ctx context.Context, reqs []ratelimit.BatchItem, results []ratelimit.Result, fps []uint64) error {
	if s.refusals == nil {
		return s.run(ctx, reqs, results)
	}
	sent := s.refusals.now()
	for i, r := range reqs {
		if r.Cost < 0 {
			s.refusals.forget(fps[i])
		}
	}
	if err := s.run(ctx, reqs, results); err != nil {
		return err
	}
	// A refused batch spent nothing: the results of its allowed requests
	// are what they would have left, not what their buckets hold.
	all := !slices.ContainsFunc(results[:len(reqs)], func(res ratelimit.Result) bool { return !res.Allowed })
	for i, r := range reqs {
		if r.Cost >= 0 && (all || !results[i].Allowed) {
			s.refusals.record(fps[i], r, sent, results[i])
		}
	}
	return nil
}

// oneNode reports whether the keys of reqs are sure to live on one node.
func (s *Store) oneNode(reqs []ratelimit.BatchItem) bool {
	switch s.client.(type) {
	case *redis.ClusterClient:
		slot := -1
		for _, r := range reqs {
			k := slotOf(s.key(r))
			if slot >= 0 && k != slot {
				return false
			}
			slot = k
		}
		return true
	case *redis.Ring:
		return len(reqs) < 2
	}
	return true
}

func (s *Store) key(r ratelimit.BatchItem) string {
	return s.prefix + r.Policy.Name + ":" + shortKey(r.Key)
}

// maxRawKey is the longest client key kept as it is in a Redis key name.
const maxRawKey = 128

// shortKey returns key, or for a key longer than maxRawKey (a 100 kB header
// from a custom key function, say) "#" and its SHA-256 in base64url, after
// its hash tag ("{tag}") if it has one, so that a Redis Cluster still puts it
// in the slot its tag chooses. Redis never holds long or raw secrets that a
// key function forgot to hash.
func shortKey(key string) string {
	if len(key) <= maxRawKey {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	h := "#" + base64.RawURLEncoding.EncodeToString(sum[:])
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 && j <= maxRawKey {
			h = key[i:i+j+2] + h
		}
	}
	return h
}

// The script's arguments that do not change, boxed once.
var (
	argEvalSha any = "evalsha"
	argEval    any = "eval"
	argSHA     any = takeScript.Hash()
	argSource  any = takeSource
	argNone    any = ""
)

// run decides reqs, as one group of the script (see take.lua), and fills
// results.
func (s *Store) run(parent context.Context, reqs []ratelimit.BatchItem, results []ratelimit.Result) error {
	reply, now, err := s.group(parent, reqs, appendKind)
	if err != nil {
		return err
	}
	for i, r := range reqs {
		allowed, ahead, credit, err := decision(reply, i)
		if err != nil {
			return err
		}
		// The script reports how far the state is ahead of now; the
		// algorithm depends only on that, so it decides at a now of 0.
		var next int64
		results[i], next = r.Policy.Decide(ahead, 0, r.Cost)
		results[i].Until = now + next + credit // see take.lua's "refund"
		if allowed > 1 || results[i].Allowed != (allowed == 1) {
			return fmt.Errorf("redisstore: the script decided %d with the state %d ahead of now, the algorithm %v", allowed, ahead, results[i].Allowed)
		}
	}
	return nil
}

// group sends reqs as one group of the script, within the store's
// Timeout, with the kind and arguments of each that appendArgs appends,
// and returns the group's reply and the time it was decided at.
func (s *Store) group(parent context.Context, reqs []ratelimit.BatchItem, appendArgs func([]any, ratelimit.BatchItem) []any) ([]any, int64, error) {
	ctx, cancel := context.WithTimeout(parent, s.timeout)
	defer cancel()
	c := s.newCall(ctx, len(reqs))
	s.dials.watch(&c.watch, ctx, cancel)
	defer s.dials.done(&c.watch)
	for i, r := range reqs {
		c.keys()[i] = s.key(r)
		c.args = appendArgs(c.args, r)
	}
	reply, err := s.decide(c)
	s.dials.done(&c.watch)
	if errors.Is(err, storeerr.ErrKeyState) {
		return nil, 0, keyError(reqs, err)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("redisstore: %w", s.failure(parent, ctx, &c.watch, err))
	}
	now, err := groupNow(reply, len(reqs))
	return reply, now, err
}

// groupNow returns the time at which the script decided a group of n keys,
// the pair that ends its reply, in Unix nanoseconds.
func groupNow(reply []any, n int) (int64, error) {
	if len(reply) != 5*n+2 {
		return 0, fmt.Errorf("redisstore: malformed reply %v", reply)
	}
	now, ok := span(reply, 5*n)
	if !ok {
		return 0, fmt.Errorf("redisstore: malformed reply %v", reply)
	}
	return now, nil
}

// decision returns the i-th decision of a group's reply: what the script
// decided (0 refused, 1 allowed, 2 + E a lease granted in epoch E), how
// far the state was ahead of now, and the bucket's credit after the
// decision, in nanoseconds.
func decision(reply []any, i int) (allowed, ahead, credit int64, err error) {
	allowed, ok1 := reply[5*i].(int64)
	ahead, ok2 := span(reply, 5*i+1)
	credit, ok3 := span(reply, 5*i+3)
	if !ok1 || !ok2 || !ok3 || allowed < 0 {
		return 0, 0, 0, fmt.Errorf("redisstore: malformed reply %v", reply)
	}
	return allowed, ahead, credit, nil
}

// span returns the pair of seconds and nanoseconds at reply[i:i+2] in
// nanoseconds, if it is one that an int64 holds.
func span(reply []any, i int) (int64, bool) {
	sec, ok1 := reply[i].(int64)
	nsec, ok2 := reply[i+1].(int64)
	if !ok1 || !ok2 || sec < 0 || sec > math.MaxInt64/1_000_000_000-1 || nsec < 0 || nsec >= 1e9 {
		return 0, false
	}
	return sec*1e9 + nsec, true
}

// newCall returns a call of the script that decides n keys as one group:
// EVALSHA sha n key… n now-s now-n, the keys for the caller to set
// (c.keys()) and each key's kind and arguments to append (see appendKind).
func (s *Store) newCall(ctx context.Context, n int) *call {
	c := &call{ctx: ctx, n: n, args: make([]any, 3+n, 9+6*n)}
	c.args[0], c.args[1], c.args[2] = argEvalSha, argSHA, n
	c.args = append(c.args, n, argNone, argNone)
	if s.now != nil {
		ns := s.now().UnixNano()
		c.args[4+n], c.args[5+n] = ns/1e9, ns%1e9
	}
	return c
}

// appendKind appends to args the kind of r's decision and its arguments
// (see take.lua): the increment and the bound, pairs of seconds and
// nanoseconds.
func appendKind(args []any, r ratelimit.BatchItem) []any {
	iv := int64(r.Policy.Limit.Interval())
	var kind any = "gcra"
	inc, bound := r.Cost*iv, r.Policy.Limit.Burst()*iv
	switch {
	case r.Policy.Algorithm == ratelimit.LeakyShape:
		kind, bound = "shape", algo.ShapeBound(iv, r.Policy.Limit.Burst(), int64(r.Policy.MaxDelay), r.Policy.Immediate)
	case r.Policy.Algorithm == algo.Ban:
		kind, inc = "ban", r.Cost // a ban's length, in nanoseconds
	}
	return append(args, kind, inc/1e9, inc%1e9, bound/1e9, bound%1e9)
}

// A call is one group of the script on its way to Redis: the requests of
// one Take or TakeAll, decided all or nothing.
type call struct {
	ctx   context.Context // the caller's, with the store's deadline
	n     int             // the number of keys
	args  []any           // the call as a command of its own: EVALSHA sha n keys… m now… (…)…
	reply []any           // once decided: per key allowed, ahead-s, ahead-n
	err   error           // or why it could not be
	done  chan struct{}   // for a queued call: closed once reply or err is set
	watch watcher         // the caller's, ending ctx on a refused dial (see dialWatch)
}

func (c *call) keys() []any { return c.args[3 : 3+c.n] }
func (c *call) argv() []any { return c.args[3+c.n:] }

// decide sends c and returns its reply or error. Through a go-redis client
// it may share a round trip with concurrent calls (see batcher); through
// any other Scripter it goes alone.
func (s *Store) decide(c *call) ([]any, error) {
	switch {
	case s.proc == nil:
		s.runAlone(c)
	case s.batching:
		return s.batch.send(s.proc, c)
	default:
		settle(process(c.ctx, s.proc, redis.NewCmd(c.ctx, c.args...)), c)
	}
	return c.reply, c.err
}

// runAlone sends c through a Scripter that is no go-redis client, with
// EVALSHA, and EVAL when the server lacks the script.
func (s *Store) runAlone(c *call) {
	keys := make([]string, c.n)
	for i, k := range c.keys() {
		keys[i] = k.(string)
	}
	settle(takeScript.Run(c.ctx, s.client, keys, c.argv()...), c)
}

// command returns the script call that decides calls, one group each.
func command(ctx context.Context, calls []*call) *redis.Cmd {
	if len(calls) == 1 {
		return redis.NewCmd(ctx, calls[0].args...)
	}
	keys, size := 0, 3
	for _, c := range calls {
		keys += c.n
		size += len(c.args) - 3
	}
	args := make([]any, 3, size)
	args[0], args[1], args[2] = argEvalSha, argSHA, keys
	for _, c := range calls {
		args = append(args, c.keys()...)
	}
	for _, c := range calls {
		args = append(args, c.argv()...)
	}
	return redis.NewCmd(ctx, args...)
}

// settle sets the reply or error of each of calls from cmd, the script
// call that decided them, one group each.
func settle(cmd *redis.Cmd, calls ...*call) {
	err := cmd.Err()
	groups, ok := cmd.Val().([]any)
	if err == nil && (!ok || len(groups) != len(calls)) {
		err = fmt.Errorf("malformed reply %v", cmd.Val())
	}
	for i, c := range calls {
		if err != nil {
			c.err = err
			continue
		}
		switch g := groups[i].(type) {
		case []any:
			c.reply = g
		case error: // the group's own, such as WRONGTYPE: the others stand
			c.err = keyState(g)
		default:
			c.err = fmt.Errorf("malformed reply %v", groups[i])
		}
	}
}

// keyState returns the error of a group that the script could not decide,
// g: one of its keys holds no rate-limit state (take.lua returns no other
// error for a group). It wraps storeerr.ErrKeyState, and never quotes the
// key, which g may.
func keyState(g error) error {
	if redis.HasErrorPrefix(g, "WRONGTYPE") {
		return fmt.Errorf("%w: the Redis key holds another type of value (WRONGTYPE)", storeerr.ErrKeyState)
	}
	return fmt.Errorf("%w: the Redis key's value is no rate-limit state", storeerr.ErrKeyState)
}

// keyError returns err, the keyState error of the group of reqs, naming
// their policies and the keyed hashes of their keys (as
// ratelimit.Event.KeyHash has them, in this process), never the keys.
func keyError(reqs []ratelimit.BatchItem, err error) error {
	var b strings.Builder
	if len(reqs) > 1 {
		b.WriteString("one of ")
	}
	for i, r := range reqs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "policy %q key hash %016x", r.Policy.Name, keyhash.Sum(r.Key))
	}
	return fmt.Errorf("redisstore: %s: %w", b.String(), err)
}

// process sends cmd alone, and again as EVAL on NOSCRIPT.
func process(ctx context.Context, p processor, cmd *redis.Cmd) *redis.Cmd {
	_ = p.Process(ctx, cmd)
	if isNoScript(cmd.Err()) {
		cmd = evalOf(ctx, cmd)
		_ = p.Process(ctx, cmd)
	}
	return cmd
}

// evalOf returns cmd, an EVALSHA of the take script, as an EVAL, which
// also loads the script into Redis's cache.
func evalOf(ctx context.Context, cmd *redis.Cmd) *redis.Cmd {
	args := slices.Clone(cmd.Args())
	args[0], args[1] = argEval, argSource
	return redis.NewCmd(ctx, args...)
}

func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// Acquire implements [ratelimit.SlotStore]: the slots of key (a
// Middleware's SlotName, or SlotName:KEY) are a sorted set
// PREFIX + ":inflight:" + key of tokens scored by the end of their lease,
// taken, renewed and pruned in one script call. (Policy names are never
// empty, so no bucket key starts with PREFIX + ":".)
func (s *Store) Acquire(ctx context.Context, key, token string, limit int64, lease time.Duration) (bool, error) {
	now := ""
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMilli(), 10)
	}
	ms := max(lease.Milliseconds(), 1)
	var n int64
	err := s.within(ctx, func(ctx context.Context) (err error) {
		n, err = slotsScript.Run(ctx, s.client, []string{s.slotsKey(key)}, limit, ms, token, now).Int64()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("redisstore: %w", err)
	}
	return n == 1, nil
}

// Release implements [ratelimit.SlotStore].
func (s *Store) Release(ctx context.Context, key, token string) error {
	err := s.within(ctx, func(ctx context.Context) error {
		return releaseScript.Run(ctx, s.client, []string{s.slotsKey(key)}, token).Err()
	})
	if err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	return nil
}

// within runs f, a call to Redis, under the store's deadline, and returns
// f's error as failure does.
func (s *Store) within(parent context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(parent, s.timeout)
	defer cancel()
	var w watcher
	s.dials.watch(&w, ctx, cancel)
	defer s.dials.done(&w)
	err := f(ctx)
	s.dials.done(&w) // before reading w.cause
	if err != nil {
		return s.failure(parent, ctx, &w, err)
	}
	return nil
}

// failure returns err, the error of a call made under ctx, the store's
// deadline over parent: naming the deadline when it was what ended the
// call, or the dial's error when a refused dial ended it (see dialWatch).
// The deadline has passed by the clock, not by ctx.Err: a socket's read
// deadline, set from it, may fire before ctx's own timer.
func (s *Store) failure(parent, ctx context.Context, w *watcher, err error) error {
	d, _ := ctx.Deadline()
	if pd, ok := parent.Deadline(); (!ok || pd.After(d)) && parent.Err() == nil && !time.Now().Before(d) {
		return fmt.Errorf("no answer within Options.Timeout %v: %w", s.timeout, err)
	}
	return w.cause(err)
}

func (s *Store) slotsKey(key string) string { return s.prefix + ":inflight:" + shortKey(key) }

// slotOf returns the Redis Cluster slot of key: CRC16 (XMODEM) of the key,
// or of its hash tag (the text between the first "{" and the next "}", if
// not empty), modulo 16384.
func slotOf(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
