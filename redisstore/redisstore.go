// Package redisstore is a [ratelimit.Store] in Redis, so that many instances
// of a service enforce one quota together.
//
// Every decision is one round trip: an embedded Lua script that reads the
// bucket's state, decides and writes it back atomically, run with EVALSHA
// (and EVAL when the server does not have the script yet). The script reads
// the Redis server's clock (TIME), so the clocks of the application's hosts
// never matter. A key's state is one time, the moment its bucket is full
// again (or its queue empty); the key expires then, so Redis holds only keys
// that carry information and nothing leaks. Each call touches one key, so
// the store works on Redis Cluster as well as on a single server, Sentinel
// (a failover client) or a Ring.
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
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
)

//go:embed take.lua
var takeSource string

var takeScript = redis.NewScript(takeSource)

// Store is a [ratelimit.Store] in Redis. It is safe for concurrent use.
type Store struct {
	client    redis.Scripter
	prefix    string
	timeout   time.Duration
	now       func() time.Time
	skipCheck bool
}

var _ ratelimit.Store = (*Store)(nil)

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
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	iv := int64(p.Limit.Interval)
	kind, bound := "gcra", p.Limit.Burst*iv
	if p.Algorithm == ratelimit.LeakyShape {
		kind, bound = "shape", algo.ShapeBound(p)
	}
	now := ""
	if s.now != nil {
		now = pair(s.now().UnixNano())
	}
	reply, err := takeScript.Run(ctx, s.client, []string{s.prefix + p.Name + ":" + key},
		kind, pair(cost*iv), pair(bound), now).Int64Slice()
	if err != nil {
		return ratelimit.Result{}, fmt.Errorf("redisstore: %w", err)
	}
	if len(reply) != 5 || reply[0] < 0 || reply[0] > 1 {
		return ratelimit.Result{}, fmt.Errorf("redisstore: malformed reply %v", reply)
	}
	state, at := reply[1]*1e9+reply[2], reply[3]*1e9+reply[4]
	_, res := algo.Decide(p, state, at, cost)
	if res.Allowed != (reply[0] == 1) {
		return ratelimit.Result{}, fmt.Errorf("redisstore: the script decided %v at %d from state %d, the algorithm %v", reply[0] == 1, at, state, res.Allowed)
	}
	return res, nil
}

// pair formats nanoseconds as the script's "seconds:nanoseconds".
func pair(ns int64) string {
	return strconv.FormatInt(ns/1e9, 10) + ":" + strconv.FormatInt(ns%1e9, 10)
}
