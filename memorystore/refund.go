package memorystore

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/tokenfair/ratelimit"
)

var _ ratelimit.RefundStore = (*Store)(nil)

// Refund implements [ratelimit.RefundStore]: it credits key's bucket under
// p by [ratelimit.Policy.Refund], with a compare-and-swap like Take's, and
// credits nothing when the bucket was reset after took's decision. It
// never fails and does not allocate.
func (s *Store) Refund(_ context.Context, p *ratelimit.Policy, key string, cost int64, took ratelimit.Result) error {
	fp := s.fingerprint(p.Name, key)
	taken := took.Until - int64(took.ResetAfter) // the decision's time
	for {
		now := s.now()
		if s.resets.since(fp, taken) {
			return nil
		}
		sl := s.shard(fp).tab.Load().lookup(fp)
		var old int64
		if sl != nil {
			old = sl.state.Load()
		}
		if sl == nil || old == dead || old == busy {
			// The key is not held (a full bucket), moved, a batch holds it,
			// or a reset killed it: look again under the lock, as Take does.
			s.refundLocked(fp, p, cost, took.Until, taken)
			return nil
		}
		if next := p.Refund(old, now, cost, took.Until); next == old || swap(&sl.state, old, next) {
			return nil
		}
	}
}

// refundLocked is Refund under the shard's lock, where no slot is busy or
// dies, for a key that the lock-free path did not find live.
func (s *Store) refundLocked(fp uint64, p *ratelimit.Policy, cost, until, taken int64) {
	sh := s.shard(fp)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	sl := sh.tab.Load().lookup(fp)
	if sl == nil || s.resets.since(fp, taken) {
		return // a full bucket owes nothing
	}
	for {
		old := sl.state.Load()
		if next := p.Refund(old, now, cost, until); next == old || swap(&sl.state, old, next) {
			return
		}
	}
}

// resets holds the time of each recent reset, by bucket, for as long as
// a refund of tokens taken before it may come: a decision's tokens are
// given back until its Result.Until, at most twice its policy's span after
// it (a shaping queue's longest wait and the cost after it). Resets are
// rare, so a refund looks under a lock only when one is held.
type resets struct {
	n  atomic.Int64 // len(at), read without the lock
	mu sync.Mutex
	at map[uint64][2]int64 // fingerprint → the reset's time, and when it may be forgotten
	// pruneAt is the size of at at which entries past their time are
	// dropped, doubled after each prune, so that pruning is amortised.
	pruneAt int
}

// add records a reset of the bucket fp of p at now.
func (r *resets) add(fp uint64, p *ratelimit.Policy, now int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at, r.pruneAt = map[uint64][2]int64{}, 64
	}
	if len(r.at) >= r.pruneAt {
		for k, v := range r.at {
			if v[1] <= now {
				delete(r.at, k)
			}
		}
		r.pruneAt = max(64, 2*len(r.at))
	}
	r.at[fp] = [2]int64{now, now + 2*p.Limit.Burst()*int64(p.Limit.Interval())}
	r.n.Store(int64(len(r.at)))
}

// since reports whether the bucket fp was reset at or after taken: a take
// at the reset's very instant may have come before it, and gets nothing
// back.
func (r *resets) since(fp uint64, taken int64) bool {
	if r.n.Load() == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.at[fp]
	return ok && v[0] >= taken
}
