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
// Memory is bounded in two ways, and the store starts no goroutine for
// either. A key whose bucket is full again carries no information, so it is
// dropped: when a decision leaves it full, and, for keys nobody asks about
// any more, as other keys are written. A shard's table about to grow first
// drops every key whose bucket is full, and grows only if it is still more
// than half full, so idle keys never make it grow (and the sweep, amortised,
// costs a few slots per insert). On every 64th decision the shard also
// looks at the next 8 slots from a cursor, drops the full ones and shrinks
// the table when it is less than 1/8 full: a bounded amount of work per
// call that goes round the whole table as the shard is written. (A shard
// nobody writes to keeps what it holds; a store nobody uses is freed like
// any other value.)
//
// And the number of keys is capped ([Options].MaxKeys, default 1 048 576):
// to admit a new key into a full shard the store first drops any expired
// keys among a sample of that shard, else evicts the sampled key whose
// bucket is closest to full. An evicted key starts again with a full bucket,
// so at the cap a flood of unique keys can at worst hand a few clients back
// the few tokens their buckets were missing; it can never grow memory or
// refuse service. Size the cap above the number of clients active within
// the time an empty bucket of your limit takes to fill (burst × interval).
//
// Time comes from a monotonic clock (wall-clock jumps do not affect
// decisions) unless [Options].Clock injects another.
package memorystore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/tokenfair/ratelimit"
)

// Store is an in-process [ratelimit.Store]. It is safe for concurrent use.
// It starts no goroutine and holds nothing that needs closing: dropping the
// last reference to it frees it.
type Store struct {
	seed     maphash.Seed
	shards   []shard
	shift    uint // a fingerprint's top bits choose its shard
	perShard int
	now      func() int64
}

var _ ratelimit.BatchStore = (*Store)(nil)

type shard struct {
	mu sync.Mutex
	table
	writes uint64         // calls to store, to tidy on every tidyEvery-th
	_      [128 - 56]byte // 128 bytes: no two shards share a cache line, or an adjacent pair of them
}

// Options configures a Store. A nil *Options, like the zero Options, gives
// every field its default.
type Options struct {
	// Clock is the store's time source. Nil means the system's monotonic
	// clock, so that wall-clock jumps do not affect decisions.
	Clock func() time.Time

	// MaxKeys caps the number of keys held. Zero means 1 048 576 (1<<20).
	// The cap is kept per shard (MaxKeys divided by the number of shards),
	// so eviction may begin slightly before MaxKeys keys when keys hash
	// unevenly, and never after. The package documentation says what
	// happens at the cap.
	MaxKeys int

	// Shards is the number of independently locked shards, rounded down to
	// a power of two and to at most MaxKeys. Zero means 256.
	Shards int
}

// New returns a Store configured by opts; nil opts means the defaults. It
// fails if a field is out of range.
func New(opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxKeys < 0 {
		return nil, fmt.Errorf("memorystore: MaxKeys %d: want at least 1", o.MaxKeys)
	}
	if o.Shards < 0 {
		return nil, fmt.Errorf("memorystore: Shards %d: want at least 1", o.Shards)
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = 1 << 20
	}
	if o.Shards == 0 {
		o.Shards = 256
	}
	bitsN := bits.Len(uint(min(o.Shards, o.MaxKeys))) - 1
	n := 1 << bitsN
	s := &Store{
		seed:     maphash.MakeSeed(),
		shards:   make([]shard, n),
		shift:    uint(64 - bitsN),
		perShard: o.MaxKeys / n,
	}
	if clock := o.Clock; clock != nil {
		s.now = func() int64 { return clock().UnixNano() }
	} else {
		epoch := time.Now()
		base := epoch.UnixNano()
		s.now = func() int64 { return base + int64(time.Since(epoch)) }
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
func (s *Store) Take(_ context.Context, p *ratelimit.Policy, key string, cost int64) (res ratelimit.Result, err error) {
	fp := s.fingerprint(p.Name, key)
	sh := s.shard(fp)
	sh.mu.Lock()
	now := s.now()
	old, i := sh.get(fp)
	var next int64
	res, next = p.Decide(old, now, cost)
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
// at the cap (an insert that would grow the table first drops the full
// buckets). On every tidyEvery-th call it also tidies a few slots of the
// shard, so that keys nobody asks about any more are dropped as others are
// written. The shard is locked.
func (sh *shard) store(fp uint64, i int, state, now int64, perShard int) {
	sh.writes++
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
		sh.insert(fp, state, now)
	}
	if sh.writes%tidyEvery == 0 {
		sh.tidy(now)
	}
}

// tidyEvery is how often (in calls to store) a shard tidies when no key is
// inserted. A power of two.
const tidyEvery = 64

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
