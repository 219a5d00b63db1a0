package memorystore

import (
	"context"
	"math"

	"github.com/tokenfair/ratelimit"
)

var _ ratelimit.ResetStore = (*Store)(nil)

// Reset implements [ratelimit.ResetStore]: it drops key's bucket under p,
// if the store holds it, so that the next request finds it full. It never
// fails. It takes the shard's lock, as every drop does, and kills the
// bucket's slot for good: a decision in flight on the bucket either lands
// before the reset or fails its compare-and-swap and decides again on a
// full bucket, and no other bucket changes. (A bucket that shares the
// key's fingerprint, a chance of about n/2⁶⁴ with n keys held, is
// forgotten with it.) Refund gives nothing back of what was taken before
// the reset.
func (s *Store) Reset(_ context.Context, p *ratelimit.Policy, key string) error {
	fp := s.fingerprint(p.Name, key)
	// The reset's time first: a refund that does not see it yet swaps its
	// credit in before the kill below, or fails its swap and sees it.
	s.resets.add(fp, p, s.now())
	sh := s.shard(fp)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// Under the lock no slot is busy, and none dies but by this kill.
	if sl := sh.tab.Load().lookup(fp); sl != nil {
		if _, ok := sl.kill(math.MaxInt64); ok {
			sh.live--
		}
	}
	return nil
}
