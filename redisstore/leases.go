package redisstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
	"github.com/tokenfair/ratelimit/internal/storeerr"
)

// leases is the store's token leases (Options.Lease): for each busy key,
// tokens this instance took from Redis in one decision, to spend locally,
// one request at a time, until the lease ends.
//
// Nothing is admitted that the shared bucket does not allow, at the
// moment it is admitted: the script counts the tokens leased and not yet
// given back, and keeps the bucket from refilling into their room (see
// take.lua), so the bucket and the leases together never hold more than
// the burst. A lease ends when its time is up, on this instance's clock
// started before the request left, so before the script stops counting
// it. A lease that ended, or that cannot pay for the request at hand,
// goes back with the key's next decision, in the same round trip: what is
// left of it, and its room.
//
// A lease's size follows the key's local rate: a key seen once takes its
// cost, as without leases; a key seen again within the lease time takes
// 2 tokens, and each lease spent before its end doubles the next one; a
// lease that ends unspent sizes the next to what was spent of it. The size
// is at most a maxLeaseShare of the burst, so that a few instances cannot
// take the whole bucket between them.
//
// The table is direct-mapped like the refusal cache: a key takes a slot
// from another only when the other's lease has ended (giving back what is
// left of it). Each slot has its own lock, held only between memory
// operations, never across a round trip: while one request of a key goes
// to Redis for a lease, the key's other requests go to Redis alone.
type leases struct {
	seed  maphash.Seed
	dur   int64        // the lease time, in nanoseconds (whole milliseconds)
	ms    any          // the lease time in milliseconds, boxed for the script
	now   func() int64 // this instance's clock, in nanoseconds
	ids   atomic.Int64 // the number of the last lease granted
	slots [leaseSlots]leaseSlot
}

// leaseSlots is the number of keys that can hold a lease at once.
const leaseSlots = 1 << 12

// maxLeaseShare is the largest part of a policy's burst one lease takes:
// a lease is at most burst / maxLeaseShare tokens.
const maxLeaseShare = 8

type leaseSlot struct {
	mu sync.Mutex
	id int64 // the lease's number, unique in the store: a refund finds the lease that paid
	lease
}

// A lease is what a slot knows of one key.
type lease struct {
	fp      uint64 // of the policy's name and the key; 0 for none
	key     string // its Redis key, to give back what is left
	iv      int64  // the interval of its policy's limit when it was taken
	burst   int64  // and its burst: it spends for that limit only
	until   int64  // when the lease ends, 0 for no lease
	left    int64  // tokens not spent yet
	size    int64  // tokens the lease took
	epoch   int64  // the script's epoch of the lease
	shadow  int64  // the bucket's state had it kept what is left of the lease
	next    int64  // the size of the key's next lease
	seen    int64  // when the key was last decided, in Redis or from its lease
	pending bool   // a decision of the key is on its way to Redis
}

// of reports whether e was taken under p's limit (a key's limit may
// change: Policy.LimitFor).
func (e *lease) of(p *ratelimit.Policy) bool {
	return e.iv == int64(p.Limit.Interval()) && e.burst == p.Limit.Burst()
}

func newLeases(dur int64, now func() int64) *leases {
	return &leases{seed: maphash.MakeSeed(), dur: dur, ms: dur / 1e6, now: now}
}

// spend decides a request of cost for key under p from its lease, if it
// has one with enough tokens left, taken under p's limit; it reports false
// otherwise, and held when the key holds a lease nonetheless, one that has
// ended, cannot pay for the request or was taken under another limit (the
// key's limit changed: Policy.LimitFor), which takeLeased gives back.
func (l *leases) spend(fp uint64, p *ratelimit.Policy, cost int64) (_ ratelimit.Result, ok, held bool) {
	e := &l.slots[fp%leaseSlots]
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fp != fp {
		return ratelimit.Result{}, false, false
	}
	now := l.now()
	if e.left < cost || now >= e.until || !e.of(p) {
		return ratelimit.Result{}, false, e.until != 0
	}
	// The result is the algorithm's on the bucket's state as if what is
	// left of the lease were still in it, which admits cost.
	res, next := p.Decide(e.shadow, now, cost)
	if !res.Allowed {
		return ratelimit.Result{}, false, true
	}
	e.left, e.shadow, e.seen = e.left-cost, next, now
	// A refund goes back into this lease until its end, and never to the
	// bucket: negative, Until is no time of the bucket's.
	res.Until = -e.id
	return res, true, true
}

// refund gives n tokens back to the lease of the bucket fp under p that
// paid for them (numbered −until), if it has not ended and they fit in it
// (at most what it took: the script keeps room for no more). The tokens
// were taken from the shared bucket: back in the lease they are as if
// never spent. Tokens that a lease paid for are never given back to the
// bucket: a lease that has ended has returned what it had left, and the
// bucket may have refilled since.
func (l *leases) refund(fp uint64, p *ratelimit.Policy, n, until int64) {
	e := &l.slots[fp%leaseSlots]
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fp != fp || e.id != -until || e.left+n > e.size || !e.of(p) {
		return
	}
	now := l.now()
	if now >= e.until {
		return // spent from a lease that has ended: nothing to give back
	}
	e.shadow = p.Refund(e.shadow, now, n, e.shadow) // as if never spent from the lease
	e.left += n
}

// takeLeased decides a request of cost for key under p in Redis, taking a
// lease when the key is busy, and giving back in the same round trip what
// is left of the lease its slot held.
func (s *Store) takeLeased(ctx context.Context, fp uint64, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	l := s.leases
	e := &l.slots[fp%leaseSlots]

	e.mu.Lock()
	now := l.now()
	if e.pending || e.fp != fp && e.until > now {
		// Another request of this key is getting a lease, or the slot
		// holds another key's: this one goes alone.
		e.mu.Unlock()
		return s.takeOne(ctx, fp, p, key, cost)
	}
	var back *call
	if e.until != 0 {
		// The lease ended, or cannot pay for this request: it goes back,
		// what is left of it and its room, spent or not. What the refusal
		// cache knows of its bucket may then refuse too much.
		back = s.giveBack(ctx, e.lease)
		if s.refusals != nil {
			s.refusals.forget(e.fp)
		}
	}
	switch {
	case e.fp != fp || now-e.seen > l.dur || !e.of(p): // a new key, one gone quiet, a new limit
		e.lease = lease{fp: fp, iv: int64(p.Limit.Interval()), burst: p.Limit.Burst(), next: 1}
	case e.until > now: // the lease was spent before its end
		e.next = 2 * e.size
	case e.until != 0: // it ended: size the next to what was spent
		e.next = max(e.size-e.left, 1)
	default: // the last decision took no lease
		e.next = max(2*e.next, 2)
	}
	e.next = min(e.next, max(p.Limit.Burst()/maxLeaseShare, 1))
	want := max(e.next, cost)
	e.seen, e.until, e.left = now, 0, 0
	if want == cost && back == nil {
		// No lease to take or give back: the decision goes as without
		// leases (batched, if the store batches).
		e.mu.Unlock()
		return s.takeOne(ctx, fp, p, key, cost)
	}
	rkey := s.key(ratelimit.BatchItem{Policy: p, Key: key})
	e.key = rkey // for the give-back of the lease it takes
	e.pending = true
	e.mu.Unlock()

	res, granted, err := s.lease(ctx, back, fp, p, rkey, cost, want)
	if errors.Is(err, storeerr.ErrKeyState) {
		err = keyError([]ratelimit.BatchItem{{Policy: p, Key: key}}, err)
	}

	e.mu.Lock()
	e.pending = false
	if granted.until != 0 && e.fp == fp {
		granted.until += l.dur
		e.id = l.ids.Add(1)
		e.until, e.left, e.size, e.epoch, e.shadow = granted.until, want-cost, want, granted.epoch, granted.shadow
	}
	e.mu.Unlock()
	return res, err
}

// lease sends back (if not nil) and a decision of cost for the bucket
// rkey (fingerprint fp) under p,
// asking for want tokens when want > cost, in one round trip. It returns
// the request's result and, for a lease granted, its epoch, the bucket's
// state had it kept the lease but for the request's cost, and in until the
// time the request left.
func (s *Store) lease(ctx context.Context, back *call, fp uint64, p *ratelimit.Policy, rkey string, cost, want int64) (ratelimit.Result, lease, error) {
	sent := s.leases.now()
	c := s.newCall(ctx, 1)
	c.setKey(0, rkey)
	kind := len(c.args)
	c.args = appendKind(c.args, ratelimit.BatchItem{Policy: p, Cost: cost}, period{})
	if want > cost { // a lease is gcra, and what to take if the bucket has it
		w := want * int64(p.Limit.Interval())
		c.args[kind] = "lease"
		c.args = append(c.args, w/1e9, w%1e9, s.leases.ms)
	}
	calls := []*call{c}
	if back != nil {
		calls = []*call{back, c}
	}
	err := s.within(ctx, func(ctx context.Context) error {
		if s.proc == nil {
			for _, c := range calls {
				s.runAlone(ctx, c)
			}
		} else {
			groups, cmds := s.dispatch(ctx, calls)
			for i, g := range groups {
				settle(cmds[i], g...)
			}
		}
		return c.err
	})
	if errors.Is(err, storeerr.ErrKeyState) {
		return ratelimit.Result{}, lease{}, err // for takeLeased to name the key
	}
	if err != nil {
		return ratelimit.Result{}, lease{}, fmt.Errorf("redisstore: %w", err)
	}
	now, err := groupNow(c.reply, 1)
	if err != nil {
		return ratelimit.Result{}, lease{}, err
	}
	allowed, ahead, credit, err := decision(c.reply, 0)
	if err != nil {
		return ratelimit.Result{}, lease{}, err
	}
	res, next := p.Decide(ahead, 0, cost)
	res.Until = algo.Add(algo.Add(now, next), credit) // paid from the bucket: a refund goes back there
	all, _ := p.Decide(ahead, 0, want)
	var granted lease
	switch {
	case allowed >= 2 && want > cost && all.Allowed:
		granted = lease{until: sent, epoch: allowed - 2, shadow: sent + next}
	case allowed == 1 && res.Allowed, allowed == 0 && !res.Allowed:
		// No lease: the bucket lacked the room, or other instances hold
		// leases on epochs of another length (a Lease being changed).
		all = res
	default:
		return ratelimit.Result{}, lease{}, fmt.Errorf("redisstore: the script decided %d for %d tokens of %d with the state %d ahead of now, the algorithm %v", allowed, want, cost, ahead, all.Allowed)
	}
	if s.refusals != nil {
		s.refusals.record(fp, ratelimit.BatchItem{Policy: p, Cost: cost}, sent, all)
	}
	return res, granted, nil
}

// giveBack returns the call that gives back what is left of e, a lease
// that has ended or is too small for the request at hand, and frees the
// room the script keeps for it.
func (s *Store) giveBack(ctx context.Context, e lease) *call {
	c := s.newCall(ctx, 1)
	c.setKey(0, e.key)
	inc, span := e.left*e.iv, e.size*e.iv
	c.args = append(c.args, "return", inc/1e9, inc%1e9, span/1e9, span%1e9, e.epoch)
	return c
}
