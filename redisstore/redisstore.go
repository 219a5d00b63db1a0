// Package redisstore is a [ratelimit.Store] in Redis, so that many instances
// of a service enforce one quota together.
//
// Every decision is one round trip: an embedded Lua script that reads the
// bucket's state, decides and writes it back atomically, run with EVALSHA
// (and EVAL when the server does not have the script yet). The script reads
// the Redis server's clock (TIME), so the clocks of the application's hosts
// never matter. A key's state is one time, the moment its bucket is full
// again (or its queue empty); the key expires then, so Redis holds only keys
// that carry information and nothing leaks. A call touches one key, or
// several in one Cluster slot (TakeAll), so the store works on Redis
// Cluster as well as on a single server, Sentinel (a failover client) or a
// Ring.
//
// Every call has a deadline (WithTimeout, 100 ms by default). go-redis v9
// only honours a context's deadline on socket reads when the client was
// created with ContextTimeoutEnabled: true; New refuses clients that do not
// have it (SkipContextTimeoutCheck overrides), because without it a paused
// Redis would hold every request for the client's read timeout, 3 s by
// default. Combine the store with [ratelimit.NewFailover] to choose what
// happens while Redis is unavailable.
//
// Keys are PREFIX + POLICY + ":" + KEY, with the prefix "ratelimit:" by
// default. Policy names never contain ":", so no two policies' keys collide.
package redisstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
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
	client    redis.Scripter
	prefix    string
	timeout   time.Duration
	now       func() time.Time
	skipCheck bool
}

var (
	_ ratelimit.BatchStore = (*Store)(nil)
	_ ratelimit.SlotStore  = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store) error

// WithPrefix sets the prefix of every key (default "ratelimit:"). Give each
// application sharing a Redis its own prefix.
func WithPrefix(prefix string) Option {
	return func(s *Store) error {
		s.prefix = prefix
		return nil
	}
}

// WithTimeout sets the deadline of every call (default 100 ms), on top of
// any deadline the caller's context carries.
func WithTimeout(d time.Duration) Option {
	return func(s *Store) error {
		if d <= 0 {
			return errors.New("redisstore: WithTimeout: the timeout must be positive")
		}
		s.timeout = d
		return nil
	}
}

// WithClock makes the script decide at the time now returns instead of the
// Redis server's time. It exists for tests that need exact, repeatable
// decisions; production code should not use it, since instances' clocks
// differ. now must not return a time before 1970.
func WithClock(now func() time.Time) Option {
	return func(s *Store) error {
		if now == nil {
			return errors.New("redisstore: WithClock: nil clock")
		}
		s.now = now
		return nil
	}
}

// SkipContextTimeoutCheck lets New accept a client created without
// ContextTimeoutEnabled. Calls then still carry a deadline, but go-redis
// does not apply it to socket reads: a hung Redis holds requests for the
// client's ReadTimeout.
func SkipContextTimeoutCheck() Option {
	return func(s *Store) error {
		s.skipCheck = true
		return nil
	}
}

// New returns a Store that keeps its buckets in Redis through client: a
// *redis.Client (standalone, or a failover client for Sentinel), a
// *redis.ClusterClient, a *redis.Ring, or any redis.Scripter. New does no
// I/O.
func New(client redis.Scripter, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	s := &Store{client: client, prefix: "ratelimit:", timeout: 100 * time.Millisecond}
	for _, opt := range opts {
		if err := opt(s); err != nil {
			return nil, err
		}
	}
	if !s.skipCheck && !contextTimeoutEnabled(client) {
		return nil, errors.New("redisstore: the client was created without ContextTimeoutEnabled, so deadlines would not cut socket reads short; set it, or pass SkipContextTimeoutCheck")
	}
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

// Take implements [ratelimit.Store] in one round trip.
func (s *Store) Take(ctx context.Context, p ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	var res [1]ratelimit.Result
	if err := s.run(ctx, []ratelimit.Request{{Policy: p, Key: key, Cost: cost}}, res[:]); err != nil {
		return ratelimit.Result{}, err
	}
	return res[0], nil
}

// TakeAll implements [ratelimit.BatchStore] in one round trip. On a
// *redis.ClusterClient the keys must hash to one slot (give per-client keys
// a hash tag such as "{client-42}"; a Global policy's key is in a slot of
// its own); on a *redis.Ring they never are known to share a shard. In those
// cases TakeAll returns ratelimit.ErrNotAtomic and the Limiter takes the
// policies one at a time, giving back what a refusal left spent.
func (s *Store) TakeAll(ctx context.Context, reqs []ratelimit.Request, results []ratelimit.Result) error {
	if !s.oneNode(reqs) {
		return ratelimit.ErrNotAtomic
	}
	return s.run(ctx, reqs, results)
}

// oneNode reports whether the keys of reqs are sure to live on one node.
func (s *Store) oneNode(reqs []ratelimit.Request) bool {
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

func (s *Store) key(r ratelimit.Request) string { return s.prefix + r.Policy.Name + ":" + r.Key }

// run decides reqs in one script call and fills results.
func (s *Store) run(ctx context.Context, reqs []ratelimit.Request, results []ratelimit.Result) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	keys := make([]string, len(reqs))
	args := make([]any, 1, 1+3*len(reqs))
	if s.now != nil {
		args[0] = pair(s.now().UnixNano())
	} else {
		args[0] = ""
	}
	for i, r := range reqs {
		keys[i] = s.key(r)
		iv := int64(r.Policy.Limit.Interval)
		kind, inc, bound := "gcra", r.Cost*iv, r.Policy.Limit.Burst*iv
		switch {
		case r.Cost < 0:
			kind, inc = "refund", -inc
		case r.Policy.Algorithm == ratelimit.LeakyShape:
			kind, bound = "shape", algo.ShapeBound(r.Policy)
		}
		args = append(args, kind, pair(inc), pair(bound))
	}
	reply, err := takeScript.Run(ctx, s.client, keys, args...).Int64Slice()
	if err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	if len(reply) != 2+3*len(reqs) {
		return fmt.Errorf("redisstore: malformed reply %v", reply)
	}
	at := reply[0]*1e9 + reply[1]
	for i, r := range reqs {
		allowed, state := reply[2+3*i], reply[3+3*i]*1e9+reply[4+3*i]
		algo.Decide(&r.Policy, state, at, r.Cost, &results[i])
		if allowed < 0 || allowed > 1 || results[i].Allowed != (allowed == 1) {
			return fmt.Errorf("redisstore: the script decided %d at %d from state %d, the algorithm %v", allowed, at, state, results[i].Allowed)
		}
	}
	return nil
}

// Acquire implements [ratelimit.SlotStore]: the slots of key are a sorted
// set PREFIX + ":inflight:" + key of tokens scored by the end of their
// lease, taken and pruned in one script call. (Policy names are never
// empty, so no bucket key starts with PREFIX + ":".)
func (s *Store) Acquire(ctx context.Context, key string, limit int64, lease time.Duration) (string, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var b [16]byte
	rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	now := ""
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMilli(), 10)
	}
	ms := max(lease.Milliseconds(), 1)
	n, err := slotsScript.Run(ctx, s.client, []string{s.slotsKey(key)}, limit, ms, token, now).Int64()
	if err != nil {
		return "", false, fmt.Errorf("redisstore: %w", err)
	}
	return token, n == 1, nil
}

// Release implements [ratelimit.SlotStore].
func (s *Store) Release(ctx context.Context, key, token string) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := releaseScript.Run(ctx, s.client, []string{s.slotsKey(key)}, token).Err(); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	return nil
}

func (s *Store) slotsKey(key string) string { return s.prefix + ":inflight:" + key }

// pair formats nanoseconds as the script's "seconds:nanoseconds".
func pair(ns int64) string {
	return strconv.FormatInt(ns/1e9, 10) + ":" + strconv.FormatInt(ns%1e9, 10)
}

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
