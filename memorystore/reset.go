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
// key's fingerprint, a chance of about n/2⁶⁴ with n keys held and 256
// shards or more, is forgotten with it.)
func (s *Store) Reset(_ context.Context, p *ratelimit.Policy, key string) error {
	fp := s.fingerprint(p.Name, key)
	sh := s.shard(fp)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// Under the lock no slot is busy, and none dies but by this kill.
	if sl := sh.tab.Load().lookup(fp); sl != nil {
		w := sl.word.Load()
		if _, ok := sl.kill(math.MaxInt64); ok {
			sh.dropped(w)
		}
	}
	return nil
}
