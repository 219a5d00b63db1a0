// Package memorystore is the in-process [ratelimit.Store]: a sharded hash
// table of 16-byte slots (about 34 bytes a key, with the tables' room to
// grow) that decides a key it holds without a lock and without allocating.
//
// A bucket is found by a 64-bit fingerprint of its policy name and key
// (maphash, with a seed drawn when the store is made); the key itself is not
// kept. Two keys with the same fingerprint share one bucket, which makes
// both stricter, never looser; with n keys held the chance that any two
// share is about n²/2⁶⁵ (3 in 100 million at a million keys; with fewer than
// 256 shards, 2 to 256 times that), and since the seed is secret and new in
// every process nobody can aim for it. Each slot is one int64 of the
// fingerprint (the 56 bits that its shard does not imply) and the kind of
// bucket, and one of the bucket's state, in open-addressing tables of plain
// integers that the garbage collector never scans.
//
// A decision stays exact without a lock because a bucket's whole state is
// that one int64: it reads the state, decides, and swaps the new state in
// with a compare-and-swap, which fails if another decision changed the
// state meanwhile; it then decides again on the newer state, so no update
// is lost and two requests never spend the same token. Inserting a key,
// dropping one and replacing a table take the shard's lock, and never move
// a key within a table or reuse a slot: a dropped key's slot is marked
// dead for good (by a compare-and-swap too, so a decision in flight either
// lands before or fails and looks again under the lock), and a rebuild
// kills each slot as it copies its state into a new table. So a
// compare-and-swap can only ever change the key it was meant for. When two
// decisions do race for one bucket, the decisions on that shard take its
// lock for the next millisecond: on a hot key a queue on a lock costs less
// than swaps that keep failing. A batch ([Store.TakeAll]) holds the slots
// of its keys under their shards' locks until it has decided them all.
//
// Memory is bounded in two ways, and the store starts no goroutine for
// either. A key whose bucket has been full again for a second carries no
// information worth its slot, so it is dropped: a shard's table about to
// fill past 3/4 is rebuilt without those keys (and without its dead slots),
// and grows only if it is still more than half full, so idle keys never
// make it grow. And at most once per millisecond of the store's clock, a
// decision on a shard looks at the next 8 slots from a cursor, drops the
// keys full for a second and shrinks the table when less than 1/8 of it is
// live: a bounded amount of work that goes round the whole table as the
// shard is used. (A shard nobody uses keeps what it holds; a store nobody
// uses is freed like any other value.)
//
// And the number of keys is capped ([Options].MaxKeys, default 1 048 576):
// to admit a new key into a full shard the store first drops any keys with
// a full bucket among a sample of 8 keys of that shard, else evicts the
// sampled key whose bucket is closest to full relative to its own limit
// (the least time to full ÷ burst × interval; exact for the first 125
// limits a shard holds keys of, and for more the nearest of those). What a
// flood of unique keys at the cap can do is bounded:
//
//   - It never evicts a Global policy's bucket (one per policy, which the
//     cap does not count), so a global policy never admits more than its
//     burst at one instant.
//   - It never evicts a ban ([ratelimit.Penalty]) in force, so it never
//     lifts one.
//   - It may evict any other bucket, which starts again full: a client
//     gets back at most the tokens its bucket was missing (and the
//     give-backs of its requests open then, at most their cost), and only
//     once the sample holds no bucket fuller for its limit. A penalty box's
//     count of refusals ("/strikes") and its memory of bans ("/bans") are
//     such buckets: evicting them lets a client be refused up to
//     Penalty.After − 1 more times before its next ban, or makes that ban
//     last Penalty.For rather than longer.
//   - It never grows memory. A new key whose shard is at the cap with
//     nothing but global buckets and bans in force fails closed: it is not
//     kept, and its request is refused as by an empty bucket (Retry-After
//     cost × interval), until a ban ends; a new ban there is not kept
//     either (the request that earned it is still refused). Only a client
//     that gets a shard's worth of keys banned at once brings this about.
//
// Size the cap above the number of clients active within the time an empty
// bucket of your limit takes to fill (burst × interval).
//
// Time comes from a monotonic clock (wall-clock jumps do not affect
// decisions) unless [Options].Clock injects another, whose times must lie
// between the years 1970 and 2162: a bucket's state is a time in Unix
// nanoseconds, 0 for a bucket never seen, and up to two spans of a limit
// (50 years each, at most) ahead of now.
package memorystore

import (
	"context"
	"fmt"
	"github.com/tokenfair/ratelimit/internal/algo"
	"hash/maphash"
	"math/bits"
	"slices"
	"time"

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
	// Clock is the store's time source, reading between 1970 and 2162 (see
	// the package documentation). Nil means the system's monotonic clock,
	// so that wall-clock jumps do not affect decisions.
	Clock func() time.Time

	// MaxKeys caps the number of keys held, not counting the buckets of
	// Global policies (one per policy). Zero means 1 048 576 (1<<20). The
	// cap is kept per shard (MaxKeys divided by the number of shards), so
	// eviction may begin slightly before MaxKeys keys when keys hash
	// unevenly, and never after. The package documentation says what
	// happens at the cap.
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
		res.Until += sh.creditOf(sl.word.Load()) // refunds, which change it, take the lock
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
// for it would be admitted again on every request.
func noRoom(res ratelimit.Result, p *ratelimit.Policy, cost int64) ratelimit.Result {
	res.Allowed, res.Remaining, res.Delay = false, 0, 0
	res.RetryAfter = time.Duration(cost) * p.Limit.Interval()
	res.ResetAfter = time.Duration(p.Limit.Burst()) * p.Limit.Interval()
	return res
}

// TakeAll implements [ratelimit.BatchStore]: it locks the shards of every
// key (in shard order, so concurrent batches cannot deadlock), takes the
// slot of each key held so that no decision changes it meanwhile, decides
// each request at one instant, and writes the new states only if all were
// allowed. Requests on the same bucket are decided one after the other.
func (s *Store) TakeAll(_ context.Context, reqs []ratelimit.BatchItem, results []ratelimit.Result) error {
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
		results[i].Until += credit
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
