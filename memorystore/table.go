package memorystore

import (
	"math"
	"sync/atomic"
)

// A table is an open-addressing hash table from a fingerprint of (policy,
// key) to that bucket's state: 16 bytes a slot, no pointers (so the garbage
// collector never scans it), linear probing. A decision reads it and changes
// a state without a lock; only its shard's owner of the lock fills a slot or
// kills one. A slot is never reused and an entry never moves within a table:
// a key that is dropped leaves a dead slot behind, and the dead slots go
// when the shard rebuilds its table into a new one. So a slot that held a
// key's live state holds that key's state until it dies, and a
// compare-and-swap on it can only ever change that key.
type table struct {
	slots []slot // a power of two long
	mask  uint64
}

// slot holds one bucket. Its word is 0 for an empty slot; else its low 56
// bits are the bucket's fingerprint (which the shard's fingerprints share
// above them) and its top 8 its kind. Its state is the bucket's state, or
// one of the two sentinels below.
type slot struct {
	word  atomic.Uint64
	state atomic.Int64
}

// A slot's word holds the 56 bits of a fingerprint that tell the buckets of
// one shard apart (idBits), and the kind of the bucket above them.
const (
	idBits = 56
	idMask = 1<<idBits - 1
)

// credited is the top bit of a slot's word: the bucket has a credit
// (tokens were given back to it), kept in its shard's credits. A decision
// on it takes the shard's lock, which its Refund holds.
const credited = 1 << 63

// word returns the word of a slot for the fingerprint fp of a bucket of
// kind k (below 128), without credit.
func word(fp uint64, k uint8) uint64 { return fp&idMask | uint64(k)<<idBits }

// kindOf returns the kind in a slot's word.
func kindOf(w uint64) uint8 { return uint8(w>>idBits) &^ 0x80 }

// The sentinel states: no bucket's state, which is a time in Unix
// nanoseconds after 1678.
const (
	// dead marks a slot whose key was dropped, or moved into a new table:
	// a state never comes back to it.
	dead = math.MinInt64
	// busy marks a slot held by a batch (TakeAll) until it lets go, under
	// its shard's lock.
	busy = math.MinInt64 + 1
)

const (
	minSlots = 8
	// A table is rebuilt when one more entry would fill more than 3/4 of
	// its slots (live or dead), or when less than 1/8 of them are live, and
	// a rebuilt table is at most half full.
	maxLoadNum, maxLoadDen = 3, 4
)

func newTable(n int) *table {
	return &table{slots: make([]slot, n), mask: uint64(n - 1)}
}

// lookup returns fp's live slot, or nil if the table holds none or a batch
// holds it; the low 56 bits of fp are not all 0. It takes no lock. t may be
// nil. (It is small enough for the compiler to inline, on the decision's
// path: mind that when changing it.)
func (t *table) lookup(fp uint64) *slot {
	if t == nil {
		return nil
	}
	for i := fp & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		w := s.word.Load()
		if (w^fp)<<(64-idBits) == 0 { // fp's fingerprint, whatever the kind
			if st := s.state.Load(); st != dead {
				if st == busy {
					return nil
				}
				return s
			}
		} else if w == 0 {
			return nil
		}
	}
}

// put fills the first empty slot of the probe sequence of w's fingerprint
// with w and state; the fingerprint has no live slot in t. The state is
// written before the word, so a lookup that sees the word sees the state.
// The caller owns t (holds its shard's lock, or has not published it yet).
func (t *table) put(w uint64, state int64) {
	i := w & t.mask
	for t.slots[i].word.Load() != 0 {
		i = (i + 1) & t.mask
	}
	t.slots[i].state.Store(state)
	t.slots[i].word.Store(w)
}

// kill makes s dead if its state is still at most limit (a limit of
// math.MaxInt64 kills any live state) and returns the state it had; ok is
// false if the state was above the limit or s was already dead. A decision
// that changes s meanwhile makes the swap fail, and kill looks again.
func (s *slot) kill(limit int64) (state int64, ok bool) {
	for {
		st := s.state.Load()
		if st == dead || st > limit {
			return st, false
		}
		if s.state.CompareAndSwap(st, dead) {
			return st, true
		}
	}
}

// size returns the number of slots for a table that holds n entries at
// most half full.
func size(n int) int {
	s := minSlots
	for s < 2*n {
		s *= 2
	}
	return s
}
