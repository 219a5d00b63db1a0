package memorystore

import (
	"context"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/credit"
)

var _ ratelimit.ResetStore = (*Store)(nil)

// Reset implements [ratelimit.ResetStore]: the next request finds key's
// bucket under p full, and no give-back credits what was taken before.
// No other bucket changes. It never fails.
func (s *Store) Reset(_ context.Context, p *ratelimit.Policy, key string) error {
	fp := s.fingerprint(p.Name, key)
	sh := s.shard(fp)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	sl := sh.tab.Load().lookup(fp) // under the lock no slot is busy, and none dies but by a kill here
	if sl == nil {
		return nil
	}
	// Swap the state to now, as a decision does (a decision in flight on
	// the bucket either lands before the reset or fails its
	// compare-and-swap and decides again on a full bucket), and add what
	// the bucket owed to its credit, so that Refund gives nothing back of
	// what was taken before the reset; the slot goes once that credit has
	// run out. (A bucket that shares the key's fingerprint, a chance of
	// about n/2⁶⁴ with n keys held and 256 shards or more, is reset with
	// it.)
	sh.settle(sl, func(b *credit.Bucket, state int64) int64 { return b.Reset(state, now) })
	sh.idle(sl, now)
	return nil
}
