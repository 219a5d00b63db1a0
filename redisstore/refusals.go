package redisstore

import (
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
)

// refusals is the store's local refusal cache: for the keys whose last
// answer left them short of tokens, a lower bound of the bucket's state
// (the time it is full again, on this instance's clock). While that bound
// alone refuses a request, the store refuses it without asking Redis: the
// state only grows as requests spend tokens, so a bucket that the bound
// refuses, Redis refuses too. (Tokens given back by another instance may
// make room sooner; the next answer corrects the bound.)
//
// An entry answers for a second at most (recheck), then the next request
// asks Redis again: a refused client costs Redis one call a second per
// instance, and a Limiter.Reset made on another instance reaches this one
// within a second. A penalty box's ban (algo.Ban) is known the
// same way. With leases, a key found not banned is remembered so for the
// lease time, so that asking whether a key is banned costs no more round
// trips than its leases: another instance's ban is then seen a lease time
// late at most.
//
// It is a direct-mapped table of immutable entries: a key's entry replaces
// whatever its slot held, so memory is fixed, and losing an entry only
// sends a request to Redis. Safe for concurrent use; a lookup neither locks
// nor allocates.
type refusals struct {
	slots    [refusalSlots]atomic.Pointer[refusal]
	now      func() int64 // this instance's clock, in nanoseconds
	clearFor int64        // how long a key found not banned is remembered so; 0: never
}

// refusalSlots is the number of keys the cache holds at most.
const refusalSlots = 1 << 14

// recheck is how long an entry answers before the cache asks Redis again.
const recheck = int64(time.Second)

// A refusal is what the cache knows of one bucket until ask: its state is
// at least until; an until of 0 is a ban's "not banned".
type refusal struct {
	fp    uint64 // of the policy's name and the key
	until int64
	ask   int64
}

func newRefusals(now func() int64, clearFor time.Duration) *refusals {
	return &refusals{now: now, clearFor: int64(clearFor)}
}

// localClock returns this instance's clock in nanoseconds: clock's, or
// the monotonic clock's when clock is nil.
func localClock(clock func() time.Time) func() int64 {
	if clock != nil {
		return func() int64 { return clock().UnixNano() }
	}
	epoch := time.Now()
	return func() int64 { return int64(time.Since(epoch)) }
}

// fingerprint returns the 64-bit fingerprint under which the refusal
// cache and the leases know key under policy.
func fingerprint(seed maphash.Seed, policy, key string) uint64 {
	return maphash.String(seed, key) ^ maphash.String(seed, policy)*0x9e3779b97f4a7c15
}

// bound returns the lower bound the cache holds at now for the state of
// the bucket whose fingerprint is fp, or 0 (a full bucket) if it holds
// none.
func (c *refusals) bound(fp uint64, now int64) int64 {
	if e := c.slots[fp%refusalSlots].Load(); e != nil && e.fp == fp && now < e.ask {
		return e.until
	}
	return 0
}

// refuse reports whether the cache answers a request of cost for the
// bucket fp of p without Redis, and how: a refusal when the bound it holds
// refuses the request (its RetryAfter is at most the exact one), or, for a
// ban, the answer that the key is not banned.
func (c *refusals) refuse(fp uint64, p *ratelimit.Policy, cost int64) (ratelimit.Result, bool) {
	e := c.slots[fp%refusalSlots].Load()
	if e == nil || e.fp != fp {
		return ratelimit.Result{}, false
	}
	now := c.now()
	if now >= e.ask || e.until == 0 && cost != 0 {
		return ratelimit.Result{}, false
	}
	res, _ := p.Decide(e.until, now, cost)
	return res, !res.Allowed || e.until == 0
}

// refuseAll reports whether the cache refuses one of reqs, a batch of
// requests of no negative cost, deciding each at one instant on what it
// knows; results then hold those decisions.
func (c *refusals) refuseAll(fps []uint64, reqs []ratelimit.BatchItem, results []ratelimit.Result) bool {
	for _, r := range reqs {
		if r.Cost < 0 {
			return false
		}
	}
	now := c.now()
	refused := false
	for i, r := range reqs {
		results[i], _ = r.Policy.Decide(c.bound(fps[i], now), now, r.Cost)
		refused = refused || !results[i].Allowed
	}
	return refused
}

// record keeps what res, Redis's answer to a request r sent at sent (on
// the cache's clock), says of its bucket fp: if it leaves no token, the
// bucket's state is at least sent + res.ResetAfter from then on; for a
// ban's question answered "not banned", with leases, that it is not banned.
func (c *refusals) record(fp uint64, r ratelimit.BatchItem, sent int64, res ratelimit.Result) {
	ban := r.Policy.Algorithm == algo.Ban
	switch {
	case ban && r.Cost == 0 && res.Allowed:
		if c.clearFor > 0 {
			c.slots[fp%refusalSlots].Store(&refusal{fp: fp, ask: sent + c.clearFor})
		}
		return
	case res.Allowed && res.Remaining > 0:
		return // the next request of cost 1 would be allowed: nothing to refuse
	}
	until := sent + int64(res.ResetAfter)
	c.slots[fp%refusalSlots].Store(&refusal{fp: fp, until: until, ask: min(until, sent+recheck)})
}

// forget drops the bound of the bucket fp: a give-back lowers the state
// below it.
func (c *refusals) forget(fp uint64) {
	slot := &c.slots[fp%refusalSlots]
	if e := slot.Load(); e != nil && e.fp == fp {
		slot.CompareAndSwap(e, nil)
	}
}
