// Package memorystore is the in-process [ratelimit.Store]: a sharded map
// with one lock per shard and one int64 of state per key.
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
	"github.com/tokenfair/ratelimit/internal/algo"
)

// Store is an in-process [ratelimit.Store]. It is safe for concurrent use.
// Close stops its background sweep.
type Store struct {
	seed     maphash.Seed
	shards   []shard
	mask     uint64
	perShard int
	now      func() int64
	stop     chan struct{}
	done     chan struct{}
	close    sync.Once
}

var _ ratelimit.BatchStore = (*Store)(nil)

type entryKey struct{ policy, key string }

type shard struct {
	mu sync.Mutex
	m  map[entryKey]*int64 // a pointer, so that a known key is one map lookup
	_  [48]byte            // keep shards on separate cache lines
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
	n := 1 << (bits.Len(uint(min(o.shards, o.maxKeys))) - 1)
	s := &Store{
		seed:     maphash.MakeSeed(),
		shards:   make([]shard, n),
		mask:     uint64(n - 1),
		perShard: o.maxKeys / n,
	}
	for i := range s.shards {
		s.shards[i].m = make(map[entryKey]*int64)
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

// Take implements [ratelimit.Store]. It never fails and does not allocate
// for a key it already holds.
func (s *Store) Take(_ context.Context, p ratelimit.Policy, key string, cost int64) (res ratelimit.Result, err error) {
	ek := entryKey{p.Name, key}
	sh := &s.shards[maphash.String(s.seed, key)&s.mask]
	sh.mu.Lock()
	now := s.now()
	held := sh.m[ek]
	state := algo.Decide(&p, load(held), now, cost, &res)
	sh.store(ek, held, state, now, s.perShard)
	sh.mu.Unlock()
	return res, nil
}

// TakeAll implements [ratelimit.BatchStore]: it locks the shards of every
// key (in shard order, so concurrent batches cannot deadlock), decides each
// request at one instant, and writes the new states only if all were
// allowed.
func (s *Store) TakeAll(_ context.Context, reqs []ratelimit.Request, results []ratelimit.Result) error {
	var buf [8]uint64
	idx := buf[:0]
	for _, r := range reqs {
		idx = append(idx, maphash.String(s.seed, r.Key)&s.mask)
	}
	var lockBuf [8]uint64
	locked := s.lockAll(append(lockBuf[:0], idx...))
	now := s.now()
	all := true
	var stateBuf [8]int64
	states := stateBuf[:0]
	for i, r := range reqs {
		old := s.shards[idx[i]].m[entryKey{r.Policy.Name, r.Key}]
		states = append(states, algo.Decide(&r.Policy, load(old), now, r.Cost, &results[i]))
		all = all && results[i].Allowed
	}
	if all {
		for i, r := range reqs {
			ek := entryKey{r.Policy.Name, r.Key}
			sh := &s.shards[idx[i]]
			sh.store(ek, sh.m[ek], states[i], now, s.perShard)
		}
	}
	for _, i := range locked {
		s.shards[i].mu.Unlock()
	}
	return nil
}

// lockAll sorts idx in place, locks each distinct shard in ascending order
// and returns them.
func (s *Store) lockAll(idx []uint64) []uint64 {
	slices.Sort(idx)
	locked := slices.Compact(idx)
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	return locked
}

// load returns the state held at p, or 0 (a full bucket) for none.
func load(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// store records state for ek, whose state is held at p (nil if none),
// forgetting it when it carries no information (state at or before now) and
// making room at the cap. The shard is locked.
func (sh *shard) store(ek entryKey, p *int64, state, now int64, perShard int) {
	switch {
	case state <= now:
		if p != nil {
			delete(sh.m, ek)
		}
	case p != nil:
		*p = state
	default:
		if len(sh.m) >= perShard {
			sh.evict(now)
		}
		p = new(int64) // only here: &state would move state to the heap on every call
		*p = state
		sh.m[ek] = p
	}
}

// evictSample is how many keys a full shard looks at to make room.
const evictSample = 8

// evict makes room for one key: it drops the expired keys among a sample, or
// else the sampled key whose bucket is closest to full (the smallest state).
func (sh *shard) evict(now int64) {
	var victim entryKey
	oldest, seen, dropped := int64(0), 0, false
	for k, p := range sh.m {
		if v := *p; v <= now {
			delete(sh.m, k)
			dropped = true
		} else if seen == 0 || v < oldest {
			victim, oldest = k, v
		}
		if seen++; seen == evictSample {
			break
		}
	}
	if !dropped {
		delete(sh.m, victim)
	}
}

// Len returns the number of keys held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
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

// sweep drops every key whose bucket is full, one shard at a time. Go maps
// never shrink, so a shard that lost most of its keys is copied into a
// smaller map.
func (s *Store) sweep() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		now, before := s.now(), len(sh.m)
		for k, p := range sh.m {
			if *p <= now {
				delete(sh.m, k)
			}
		}
		if after := len(sh.m); before >= 1024 && after < before/4 {
			m := make(map[entryKey]*int64, after)
			for k, v := range sh.m {
				m[k] = v
			}
			sh.m = m
		}
		sh.mu.Unlock()
	}
}
