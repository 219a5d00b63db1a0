package memorystore

import (
	"context"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/credit"
)

var _ ratelimit.RefundStore = (*Store)(nil)

// Refund implements [ratelimit.RefundStore]: it gives back to key's bucket
// under p at most cost tokens, fewer when the bucket has since earned some
// of them back. It never fails.
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
	// Under the shard's lock, give back what the credit allows (see
	// ratelimit.RefundStore), swapping the new state in as a decision does.
	// A bucket with a credit keeps it in its shard, beside the table, and
	// its decisions take the shard's lock.
	sh.settle(sl, func(b *credit.Bucket, state int64) int64 {
		return b.Refund(p, state, now, cost, owed(took.Until))
	})
	return nil
}

// settle changes the state of the bucket of slot sl and what it keeps for
// its give-backs by f, which returns the new state. It marks the slot
// credited first, so that the decisions that race it take the lock, where
// the credit is; swaps the new state in as a decision does (decisions
// without the lock may race it, and f runs again); and keeps the credit,
// or forgets it and the mark when there is none. The shard is locked.
func (sh *shard) settle(sl *slot, f func(b *credit.Bucket, state int64) int64) {
	w := sl.word.Load() | credited
	sl.word.Store(w)
	for {
		old := sl.state.Load()
		b := sh.credits[w&idMask]
		if next := f(&b, old); next == old || swap(&sl.state, old, next) {
			if b == (credit.Bucket{}) {
				delete(sh.credits, w&idMask)
				sl.word.Store(w &^ credited)
				return
			}
			if sh.credits == nil {
				sh.credits = make(map[uint64]credit.Bucket)
			}
			sh.credits[w&idMask] = b
			return
		}
	}
}
