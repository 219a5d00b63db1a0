// Package memorystore is the in-process [ratelimit.Store]: a sharded hash
// table that decides a key it holds without a lock and without allocating,
// in about 34 bytes a key.
//
// Memory stays bounded without a goroutine: a key whose bucket has been
// full for a second is dropped as the store is used, and Options.MaxKeys
// caps the keys held. At the cap a new key evicts a bucket close to full,
// never a Global policy's bucket nor a ban in force; size the cap above the
// number of clients active within the time an empty bucket takes to fill
// (burst × interval; a calendar quota's period). docs/stores.md says what
// eviction may give back, and how the table decides exactly without a
// lock.
package memorystore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
	"time"

	"github.com/tokenfair/ratelimit/internal/algo"

	"github.com/tokenfair/ratelimit"
)

// Store is an in-process [ratelimit.Store]. It is safe for concurrent use.
// It starts no goroutine and holds nothing that needs closing: dropping the
// last reference to it frees it.
type Store struct {
	seed     maphash.Seed
	shards   []shard
	shift    uint   // a fingerprint's top bits choose its shard
	keep     uint64 // the bits of a fingerprint that its shard and slot tell apart
	perShard int
	now      func() int64
}

var _ ratelimit.BatchStore = (*Store)(nil)

// Options configures a Store. A nil *Options, like the zero Options, gives
// every field its default.
type Options struct {
	// Clock is the store's time source, whose times must lie between the
	// years 1970 and 2162. Nil means the system's monotonic clock.
	Clock func() time.Time

	// MaxKeys caps the number of keys held, not counting the buckets of
	// Global policies (one per policy), shard by shard: eviction may begin
	// slightly before MaxKeys keys, never after. Zero means 1 048 576.
	MaxKeys int

	// Shards is the number of shards, each with its own table and the lock
	// that inserts take, rounded down to a power of two and to at most
	// MaxKeys. Zero means 256.
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
		return nil, fmt.Errorf("memorystore: MaxKeys %d: want at least 1, or 0 for the default", o.MaxKeys)
	}
	if o.Shards < 0 {
		return nil, fmt.Errorf("memorystore: Shards %d: want at least 1, or 0 for the default", o.Shards)
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
		keep:     idMask | uint64(n-1)<<(64-bitsN),
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

// fingerprint returns the fingerprint under which the store keeps key's
// bucket under the policy named policy: of a 64-bit hash, the bits that
// choose its shard and the low 56 that its slot keeps, which are never all
// 0.
func (s *Store) fingerprint(policy, key string) uint64 {
	fp := (maphash.String(s.seed, key) ^ maphash.String(s.seed, policy)*0x9e3779b97f4a7c15) & s.keep
	if fp&idMask == 0 {
		fp |= 1
	}
	return fp
}

// shardIndex returns the index of the shard that holds fp: its top bits.
func (s *Store) shardIndex(fp uint64) uint64 { return fp >> s.shift & uint64(len(s.shards)-1) }

func (s *Store) shard(fp uint64) *shard { return &s.shards[s.shardIndex(fp)] }

// Take implements [ratelimit.Store]. It never fails and does not allocate
// for a key it already holds, and it decides a key it holds without a lock.
func (s *Store) Take(_ context.Context, p *ratelimit.Policy, key string, cost int64) (res ratelimit.Result, _ error) {
	fp := s.fingerprint(p.Name, key)
	sh := s.shard(fp)
	if sl := sh.tab.Load().lookup(fp); sl != nil {
		now := s.now()
		if now < sh.lockedUntil.Load() || sl.word.Load()&credited != 0 {
			return s.takeLocked(sh, p, fp, cost), nil // (a credited bucket's Until needs its credit)
		}
		// Read the state, decide, and swap the new state in if the state is
		// still the one read.
		old := sl.state.Load()
		if old != dead && old != busy { // else the key moved or a batch holds it: look under the lock
			var next int64
			res, next = p.Decide(old, now, cost)
			if next == old || swap(&sl.state, old, next) {
				if now >= sh.tidyAt.Load() && sh.mu.TryLock() {
					sh.tidy(now)
					sh.mu.Unlock()
				}
				return res, nil
			}
			// Another decision changed the state first: decisions on this
			// shard queue on its lock for a while, which serialises them at
			// less cost than swaps that keep failing.
			sh.lockedUntil.Store(now + contended)
		}
	}
	return s.takeLocked(sh, p, fp, cost), nil
}

// contended is how long, in the store's time, decisions on a shard take its
// lock after two of them raced for one bucket. (A variable for the tests.)
var contended = int64(time.Millisecond)

// takeLocked is Take under the shard's lock: for a key that the lock-free
// path did not find live, which it inserts if it is not there, and for a
// shard whose decisions race. It reads the clock once it has the lock (a
// decision that waited decides at the time it ends; measured, this also
// makes waiters on a hot key hand the lock over less often, and the key as
// fast as under a plain mutex).
func (s *Store) takeLocked(sh *shard, p *ratelimit.Policy, fp uint64, cost int64) (res ratelimit.Result) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now() // the time it got the lock
	if sl := sh.tab.Load().lookup(fp); sl != nil {
		// Under the lock no slot dies or is busy, but decisions without the
		// lock may still change this one.
		for {
			old := sl.state.Load()
			var next int64
			res, next = p.Decide(old, now, cost)
			if next == old || swap(&sl.state, old, next) {
				break
			}
		}
		res.Until = algo.Add(res.Until, sh.creditOf(sl.word.Load())) // refunds, which change it, take the lock
	} else {
		var next int64
		if res, next = p.Decide(0, now, cost); next > now { // else the bucket is full: nothing to keep
			if p.Global || sh.room(fp, now, s.perShard) {
				sh.insert(fp, next, now, p)
			} else if p.Algorithm != algo.Ban { // (a ban finding no room is not kept)
				res = noRoom(res, p, cost)
			}
		}
	}
	if now >= sh.tidyAt.Load() {
		sh.tidy(now)
	}
	return res
}

// noRoom turns res, the decision on a new key of p that finds no room (its
// shard is at the cap and holds only keys that are never evicted), into the
// refusal of an empty bucket: the key is not kept, and a request admitted
// for it would be admitted again on every request. An empty calendar quota
// is refused until its reset.
func noRoom(res ratelimit.Result, p *ratelimit.Policy, cost int64) ratelimit.Result {
	res.Allowed, res.Remaining, res.Delay = false, 0, 0
	if p.Limit.Interval() == 0 {
		res.RetryAfter = res.ResetAfter // the time to the reset
		return res
	}
	res.RetryAfter = time.Duration(cost) * p.Limit.Interval()
	res.ResetAfter = time.Duration(p.Limit.Burst()) * p.Limit.Interval()
	return res
}

// TakeAll implements [ratelimit.BatchStore]: it decides every request at
// one instant and spends only if all are allowed; requests on one bucket
// are decided one after the other. It never fails.
func (s *Store) TakeAll(_ context.Context, reqs []ratelimit.BatchItem, results []ratelimit.Result) error {
	// Lock the shards of every key (in shard order, so that concurrent
	// batches cannot deadlock), take the slot of each key held so that no
	// decision changes it meanwhile, decide each request at one instant,
	// and write the new states only if all were allowed.
	var fpBuf [8]uint64
	fps := fpBuf[:0]
	for _, r := range reqs {
		fps = append(fps, s.fingerprint(r.Policy.Name, r.Key))
	}
	var lockBuf [8]uint64
	locked := s.lockAll(fps, lockBuf[:0])
	defer func() {
		for _, i := range locked {
			s.shards[i].mu.Unlock()
		}
	}()
	now := s.now()
	var slotBuf [8]*slot
	var stateBuf, heldBuf [8]int64
	slots, states, held := slotBuf[:0], stateBuf[:0], heldBuf[:0]
	all := true
	for i, fp := range fps {
		// The state before request i: the one an earlier request of the
		// batch on the same bucket left, or the one held.
		var sl *slot
		old, credit := int64(0), int64(0)
		first := slices.Index(fps[:i], fp) // the batch's first request on this bucket, if not i
		if first >= 0 {
			old = states[first]
			if slots[first] != nil {
				credit = s.shard(fp).creditOf(slots[first].word.Load())
			}
		} else if sl = s.shard(fp).tab.Load().lookup(fp); sl != nil {
			old, credit = sl.claim(), s.shard(fp).creditOf(sl.word.Load())
		}
		var next int64
		results[i], next = reqs[i].Policy.Decide(old, now, reqs[i].Cost)
		results[i].Until = algo.Add(results[i].Until, credit)
		if first >= 0 {
			states[first] = next // the first request on a bucket carries its last state
		}
		slots, states, held = append(slots, sl), append(states, next), append(held, old)
		all = all && results[i].Allowed
	}
	// Make room for the new keys while the held slots are held (eviction
	// passes over them); a new key that finds none refuses the batch.
	for i, fp := range fps {
		if all && slots[i] == nil && states[i] > now && !reqs[i].Policy.Global && slices.Index(fps[:i], fp) < 0 &&
			!s.shard(fp).room(fp, now, s.perShard) {
			results[i], all = noRoom(results[i], reqs[i].Policy, reqs[i].Cost), false
		}
	}
	// Let go of the held slots, then insert: an insert may rebuild the
	// table, which needs every slot free.
	for i, sl := range slots {
		switch {
		case sl != nil && all:
			sl.state.Store(states[i])
		case sl != nil:
			sl.state.Store(held[i])
		}
	}
	if all {
		for i, fp := range fps {
			if slots[i] != nil || states[i] <= now || slices.Index(fps[:i], fp) >= 0 {
				continue
			}
			if p, sh := reqs[i].Policy, s.shard(fp); p.Global || sh.room(fp, now, s.perShard) {
				sh.insert(fp, states[i], now, p)
			}
		}
	}
	return nil
}

// claim marks the live slot sl busy and returns its state; the caller holds
// its shard's lock and stores a state back before letting it go.
func (sl *slot) claim() int64 {
	for {
		if st := sl.state.Load(); sl.state.CompareAndSwap(st, busy) {
			return st
		}
	}
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

// Len returns the number of keys held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.live
		sh.mu.Unlock()
	}
	return n
}
