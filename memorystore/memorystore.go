// Package memorystore is the in-process [ratelimit.Store]: a sharded hash
// table with one lock per shard, 16 bytes per key and no allocation per
// decision.
//
// A bucket is found by a 64-bit fingerprint of its policy name and key
// (maphash, with a seed drawn when the store is made); the key itself is not
// kept. Two keys with the same fingerprint share one bucket, which makes
// both stricter, never looser; with n keys held the chance that any two
// share is about n²/2⁶⁵ (3 in 100 million at a million keys), and since the
// seed is secret and new in every process nobody can aim for it. Each slot is
// the fingerprint and the bucket's state (one int64), in open-addressing
// tables of plain integers that the garbage collector never scans.
//
// Memory is bounded in two ways. A key whose bucket is full again carries no
// information, so it is dropped: when a decision leaves it full, and by a
// background sweep (every minute by default) for keys nobody asks about.
// And the number of keys is capped (WithMaxKeys, default 1 048 576): to
// admit a new key into a full shard the store first drops any expired keys
// among a sample of that shard, else evicts the sampled key whose bucket is
// closest to full. An evicted key starts again with a full bucket, so at the
// cap a flood of unique keys can at worst hand a few clients back the few
// tokens their buckets were missing; it can never grow memory or refuse
// service. Size the cap above the number of clients active within one Span
// of your limit.
//
// Time comes from a monotonic clock (wall-clock jumps do not affect
// decisions) unless WithClock injects another.
package memorystore

import (
	"context"
	"errors"
	"hash/maphash"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/tokenfair/ratelimit"
)

// Store is an in-process [ratelimit.Store]. It is safe for concurrent use.
// Close stops its background sweep.
type Store struct {
	seed     maphash.Seed
	shards   []shard
	shift    uint // a fingerprint's top bits choose its shard
	perShard int
	now      func() int64
	stop     chan struct{}
	done     chan struct{}
	close    sync.Once
}

var _ ratelimit.BatchStore = (*Store)(nil)

type shard struct {
	mu sync.Mutex
	table
	_ [128 - 40]byte // 128 bytes: no two shards share a cache line, or an adjacent pair of them
}

// Option configures a Store.
type Option func(*options) error

type options struct {
	clock   func() time.Time
	maxKeys int
	shards  int
	sweep   time.Duration
}

// WithClock makes the store read time from now instead of the system's
// monotonic clock. Tests use it with a fake clock.
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return errors.New("memorystore: WithClock: nil clock")
		}
		o.clock = now
		return nil
	}
}

// WithMaxKeys caps the number of keys held (default 1 048 576). The cap is
// kept per shard (n divided by the number of shards), so eviction may begin
// slightly before n keys when keys hash unevenly, and never after. The
// package documentation says what happens at the cap.
func WithMaxKeys(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return errors.New("memorystore: WithMaxKeys: need at least 1 key")
		}
		o.maxKeys = n
		return nil
	}
}

// WithShards sets the number of independently locked shards (default 256,
// rounded down to a power of two and to at most the key cap).
func WithShards(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return errors.New("memorystore: WithShards: need at least 1 shard")
		}
		o.shards = n
		return nil
	}
}

// WithSweepInterval sets how often a background goroutine drops keys whose
// buckets are full again (default one minute). Zero disables the sweep and
// the goroutine; full buckets are then dropped only when touched or evicted.
func WithSweepInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return errors.New("memorystore: WithSweepInterval: negative interval")
		}
		o.sweep = d
		return nil
	}
}

// New returns a Store. Call Close when done with it to stop the sweep.
func New(opts ...Option) (*Store, error) {
	o := options{maxKeys: 1 << 20, shards: 256, sweep: time.Minute}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	bitsN := bits.Len(uint(min(o.shards, o.maxKeys))) - 1
	n := 1 << bitsN
	s := &Store{
		seed:     maphash.MakeSeed(),
		shards:   make([]shard, n),
		shift:    uint(64 - bitsN),
		perShard: o.maxKeys / n,
	}
	if o.clock != nil {
		clock := o.clock
		s.now = func() int64 { return clock().UnixNano() }
	} else {
		epoch := time.Now()
		base := epoch.UnixNano()
		s.now = func() int64 { return base + int64(time.Since(epoch)) }
	}
	if o.sweep > 0 {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.sweepEvery(o.sweep)
	}
	return s, nil
}

// fingerprint returns the 64-bit fingerprint under which the store keeps
// key's bucket under the policy named policy. It is never 0.
func (s *Store) fingerprint(policy, key string) uint64 {
	fp := maphash.String(s.seed, key) ^ maphash.String(s.seed, policy)*0x9e3779b97f4a7c15
	if fp == 0 {
		fp = 1
	}
	return fp
}

// shardIndex returns the index of the shard that holds fp: its top bits.
func (s *Store) shardIndex(fp uint64) uint64 { return fp >> s.shift & uint64(len(s.shards)-1) }

func (s *Store) shard(fp uint64) *shard { return &s.shards[s.shardIndex(fp)] }

// Take implements [ratelimit.Store]. It never fails and does not allocate
// for a key it already holds.
func (s *Store) Take(_ context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	fp := s.fingerprint(p.Name, key)
	sh := s.shard(fp)
	sh.mu.Lock()
	now := s.now()
	old, i := sh.get(fp)
	res, next := p.Decide(old, now, cost)
	sh.store(fp, i, next, now, s.perShard)
	sh.mu.Unlock()
	return res, nil
}

// TakeAll implements [ratelimit.BatchStore]: it locks the shards of every
// key (in shard order, so concurrent batches cannot deadlock), decides each
// request at one instant, and writes the new states only if all were
// allowed.
func (s *Store) TakeAll(_ context.Context, reqs []ratelimit.Request, results []ratelimit.Result) error {
	var fpBuf [8]uint64
	fps := fpBuf[:0]
	for _, r := range reqs {
		fps = append(fps, s.fingerprint(r.Policy.Name, r.Key))
	}
	var lockBuf [8]uint64
	locked := s.lockAll(fps, lockBuf[:0])
	now := s.now()
	all := true
	var stateBuf [8]int64
	states := stateBuf[:0]
	for i, r := range reqs {
		old, _ := s.shard(fps[i]).get(fps[i])
		var next int64
		results[i], next = r.Policy.Decide(old, now, r.Cost)
		states = append(states, next)
		all = all && results[i].Allowed
	}
	if all {
		for i, fp := range fps {
			sh := s.shard(fp)
			_, at := sh.get(fp)
			sh.store(fp, at, states[i], now, s.perShard)
		}
	}
	for _, i := range locked {
		s.shards[i].mu.Unlock()
	}
	return nil
}

// lockAll locks the distinct shards of fps in ascending order and returns
// their indexes, appended to locked.
func (s *Store) lockAll(fps, locked []uint64) []uint64 {
	for _, fp := range fps {
		locked = append(locked, s.shardIndex(fp))
	}
	slices.Sort(locked)
	locked = slices.Compact(locked)
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	return locked
}

// store records state for fp, held at slot i (-1 if none), forgetting it
// when it carries no information (state at or before now) and making room
// at the cap. The shard is locked.
func (sh *shard) store(fp uint64, i int, state, now int64, perShard int) {
	switch {
	case state <= now:
		if i >= 0 {
			sh.remove(i)
		}
	case i >= 0:
		sh.slots[i].state = state
	default:
		if sh.n >= perShard {
			sh.evict(fp, now)
		}
		sh.insert(fp, state)
	}
}

// Len returns the number of keys held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Close stops the background sweep and waits for it to return. The store
// still answers Take afterwards. Close is idempotent and always returns nil.
func (s *Store) Close() error {
	s.close.Do(func() {
		if s.stop != nil {
			close(s.stop)
			<-s.done
		}
	})
	return nil
}

func (s *Store) sweepEvery(d time.Duration) {
	defer close(s.done)
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sweep()
		}
	}
}

// sweep drops every key whose bucket is full, one shard at a time, and
// shrinks shards that lost most of their keys.
func (s *Store) sweep() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.table.sweep(s.now())
		sh.mu.Unlock()
	}
}
