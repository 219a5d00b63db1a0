package memorystore

import (
	"context"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/credit"
)

var _ ratelimit.RefundStore = (*Store)(nil)

// Refund implements [ratelimit.RefundStore]: under the shard's lock, it
// gives back to key's bucket under p what its credit allows, swapping the
// new state in as a decision does (decisions without the lock may race it)
// and then storing the credit. It never fails.
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
	later := sh.later(fp)
	for {
		old, c := sl.state.Load(), sl.credit.Load()
		l := *later
		next, nc := credit.Refund(p, old, c, &l, now, cost, owed(took.Until))
		if next == old || swap(&sl.state, old, next) {
			sl.credit.Store(nc)
			*later = l
			return nil
		}
	}
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
