package memorystore

import (
	"math"
	"sync"
	"sync/atomic"
)

// shard is one part of the store. Its first cache line is read by every
// decision and written only when the table is replaced, when the shard is
// tidied and when two decisions race; the second is written by the holders
// of its lock.
type shard struct {
	tab         atomic.Pointer[table] // nil until the first key
	tidyAt      atomic.Int64          // the store's time from which a decision tidies
	lockedUntil atomic.Int64          // the store's time until which decisions take the lock
	_           [40]byte

	mu         sync.Mutex // held to fill, kill or replace slots
	live, used int        // live slots, and slots filled (live or dead), in tab
	next       uint64     // where tidy looks next (taken modulo the table's length)
	_          [32]byte
}

// tidyEvery is how often, in the store's time, a shard that decisions
// reach tidies: at most once per millisecond.
const tidyEvery = int64(1e6)

// keepFull is how long a key is kept after its bucket is full again, so
// that a client that comes back within it finds its slot: tidying and
// rebuilding drop only the keys full for longer. (At the cap, full keys go
// first.)
const keepFull = int64(1e9)

// tidySlots is how many slots one tidy looks at.
const tidySlots = 8

// evictSample is how many keys a full shard looks at to make room.
const evictSample = 8

// insert adds fp, which has no live slot, with state: it makes room first
// at the cap, and rebuilds the table when it would be more than 3/4 filled.
// The shard is locked and no slot of it is busy.
func (sh *shard) insert(fp uint64, state, now int64, perShard int) {
	if sh.live >= perShard {
		sh.evict(fp, now)
	}
	t := sh.tab.Load()
	if t == nil {
		t = newTable(minSlots)
		sh.tab.Store(t)
	} else if (sh.used+1)*maxLoadDen > len(t.slots)*maxLoadNum {
		t = sh.rebuild(now, 1, len(t.slots)) // an insert never shrinks it
	}
	t.put(fp, state)
	sh.live++
	sh.used++
}

// rebuild moves into a new table every live key except those whose bucket
// has been full for keepFull, publishes it and returns it. The new table
// has at least floor slots, and room for extra more keys at most half
// full. Each old slot dies as its key moves, so a decision that had found
// it either swapped its state in before (and the move carries it) or fails
// and looks again under the lock, in the new table. The shard is locked
// and no slot of it is busy.
func (sh *shard) rebuild(now int64, extra, floor int) *table {
	old := sh.tab.Load()
	keep := now - keepFull
	n := extra
	for i := range old.slots {
		if old.slots[i].fp.Load() != 0 && old.slots[i].state.Load() > keep {
			n++
		}
	}
	t := newTable(max(floor, size(n)))
	live := 0
	for i := range old.slots {
		s := &old.slots[i]
		fp := s.fp.Load()
		if fp == 0 {
			continue
		}
		if st, ok := s.kill(math.MaxInt64); ok && st > keep {
			if (live+1+extra)*maxLoadDen > len(t.slots)*maxLoadNum {
				t = t.grown() // decisions refilled buckets since the count
			}
			t.put(fp, st)
			live++
		}
	}
	sh.tab.Store(t)
	sh.live, sh.used = live, live
	return t
}

// grown returns a copy of t, which nobody else sees, twice as long.
func (t *table) grown() *table {
	g := newTable(2 * len(t.slots))
	for i := range t.slots {
		if fp := t.slots[i].fp.Load(); fp != 0 {
			g.put(fp, t.slots[i].state.Load())
		}
	}
	return g
}

// evict makes room for one key: it drops the expired keys among a sample of
// the live entries from slot from on, or else the sampled key whose bucket
// is closest to full (the smallest state). from should be random (the new
// key's fingerprint is), so that the sample is. The shard is locked and
// holds at least one live key.
func (sh *shard) evict(from uint64, now int64) {
	t := sh.tab.Load()
	for {
		var victim *slot
		oldest := int64(math.MaxInt64)
		dropped, seen := 0, 0
		for i := from & t.mask; seen < min(evictSample, sh.live); i = (i + 1) & t.mask {
			s := &t.slots[i]
			st := s.state.Load()
			if s.fp.Load() == 0 || st == dead {
				continue
			}
			seen++
			if _, ok := s.kill(now); ok {
				dropped++
			} else if st < oldest {
				victim, oldest = s, st
			}
		}
		if dropped == 0 && victim != nil {
			if _, ok := victim.kill(oldest); ok {
				dropped = 1
			}
		}
		if dropped > 0 {
			sh.live -= dropped
			return
		}
		// A decision changed the victim meanwhile: sample again.
	}
}

// tidy looks at the next slots from where the last tidy stopped, drops the
// keys whose bucket has been full for keepFull, and rebuilds the table
// smaller when less than 1/8 of it is live. Successive calls go round the
// whole table. The shard is locked and no slot of it is busy.
func (sh *shard) tidy(now int64) {
	sh.tidyAt.Store(now + tidyEvery)
	t := sh.tab.Load()
	if t == nil {
		return
	}
	for range tidySlots {
		s := &t.slots[sh.next&t.mask]
		sh.next++
		if s.fp.Load() != 0 {
			if _, ok := s.kill(now - keepFull); ok {
				sh.live--
			}
		}
	}
	if len(t.slots) > minSlots && sh.live*8 < len(t.slots) {
		sh.rebuild(now, 0, minSlots)
	}
}
