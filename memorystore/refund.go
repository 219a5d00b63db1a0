package memorystore

import (
	"context"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/credit"
)

var _ ratelimit.RefundStore = (*Store)(nil)

// Refund implements [ratelimit.RefundStore]: under the shard's lock, it
// gives back to key's bucket under p what its credit allows (see
// [ratelimit.RefundStore]), swapping the new state in as a decision does.
// A bucket with a credit keeps it in its shard, beside the table, and its
// decisions take the shard's lock. It never fails.
func (s *Store) Refund(_ context.Context, p *ratelimit.Policy, key string, cost int64, took ratelimit.Result) error {
	fp := s.fingerprint(p.Name, key)
	sh := s.shard(fp)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	sl := sh.tab.Load().lookup(fp) // under the lock no slot is busy or dies
	if sl == nil {
		return nil // a bucket not held is full: nothing is owed
	}
	// Credited first, so that the decisions that race this one take the
	// lock, where the credit is.
	w := sl.word.Load() | credited
	sl.word.Store(w)
	later := sh.later(fp)
	for {
		old := sl.state.Load()
		l := *later
		next, c := credit.Refund(p, old, sh.creditOf(w), &l, now, cost, owed(took.Until))
		if next == old || swap(&sl.state, old, next) {
			*later = l
			sh.setCredit(sl, w, c)
			return nil
		}
	}
}

// setCredit sets the credit of the bucket of slot sl, whose word is w. The
// shard is locked.
func (sh *shard) setCredit(sl *slot, w uint64, c int64) {
	if c == 0 {
		delete(sh.credits, w&idMask)
		sl.word.Store(w &^ credited)
		return
	}
	if sh.credits == nil {
		sh.credits = make(map[uint64]int64)
	}
	sh.credits[w&idMask] = c
	sl.word.Store(w | credited)
}

// maxLater is how many buckets of a shard keep what was given back per
// take; past it they are all forgotten, which only makes give-backs
// smaller.
const maxLater = 1024

// later returns what the shard keeps of the give-backs per take of the
// bucket fp. The shard is locked.
func (sh *shard) later(fp uint64) *credit.Later {
	l := sh.laters[fp]
	if l == nil {
		if len(sh.laters) >= maxLater || sh.laters == nil {
			sh.laters = make(map[uint64]*credit.Later)
		}
		l = new(credit.Later)
		sh.laters[fp] = l
	}
	return l
}
