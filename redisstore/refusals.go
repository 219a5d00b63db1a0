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
// (the time it is full again, on this instance's clock; for a calendar
// quota, the tokens spent until its reset). While that bound alone refuses
// a request, the store refuses it without asking Redis: the state only
// grows as requests spend tokens, so a bucket that the bound refuses,
// Redis refuses too. (Tokens given back by another instance may make room
// sooner; the next answer corrects the bound.) An entry answers only for
// the limit it was learnt under: a key whose limit changed
// (Policy.LimitFor) asks Redis.
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

// A refusal is what the cache knows of one bucket under limit until ask:
// its state is at least until (an until of 0 is a ban's "not banned"); for
// a calendar quota, until is its reset, before which it has spent at least
// spent tokens.
type refusal struct {
	fp    uint64 // of the policy's name and the key
	limit ratelimit.Limit
	until int64
	spent int64
	ask   int64
}

func newRefusals(now func() int64, clearFor time.Duration) *refusals {
	return &refusals{now: now, clearFor: int64(clearFor)}
}

// localClock returns this instance's clock in Unix nanoseconds: clock's,
// or when clock is nil the monotonic clock's, from the wall clock's time
// at the call.
func localClock(clock func() time.Time) func() int64 {
	if clock != nil {
		return func() int64 { return clock().UnixNano() }
	}
	epoch := time.Now()
	base := epoch.UnixNano()
	return func() int64 { return base + int64(time.Since(epoch)) }
}

// fingerprint returns the 64-bit fingerprint under which the refusal
// cache and the leases know key under policy.
func fingerprint(seed maphash.Seed, policy, key string) uint64 {
	return maphash.String(seed, key) ^ maphash.String(seed, policy)*0x9e3779b97f4a7c15
}

// entry returns what the cache knows at now of the bucket fp of p, or nil.
func (c *refusals) entry(fp uint64, p *ratelimit.Policy, now int64) *refusal {
	if e := c.slots[fp%refusalSlots].Load(); e != nil && e.fp == fp && now < e.ask && e.limit == p.Limit {
		return e
	}
	return nil
}

// decide returns the decision of a request of cost under p at now on what
// e, which may be nil (nothing: a full bucket), knows of its bucket.
func (e *refusal) decide(p *ratelimit.Policy, now, cost int64) ratelimit.Result {
	switch {
	case e == nil:
		res, _ := p.Decide(0, now, cost)
		return res
	case p.Limit.Interval() == 0: // a calendar quota, at an end of one of its periods
		_, end := p.Limit.Period(time.Unix(0, now))
		return quotaResult(p, end.UnixNano(), e.spent, cost, e.until-now)
	}
	res, _ := p.Decide(e.until, now, cost)
	return res
}

// refuse reports whether the cache answers a request of cost for the
// bucket fp of p without Redis, and how: a refusal when the bound it holds
// refuses the request (its RetryAfter is at most the exact one), or, for a
// ban, the answer that the key is not banned.
func (c *refusals) refuse(fp uint64, p *ratelimit.Policy, cost int64) (ratelimit.Result, bool) {
	now := c.now()
	e := c.entry(fp, p, now)
	if e == nil || e.until == 0 && cost != 0 {
		return ratelimit.Result{}, false
	}
	res := e.decide(p, now, cost)
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
		results[i] = c.entry(fps[i], r.Policy, now).decide(r.Policy, now, r.Cost)
		refused = refused || !results[i].Allowed
	}
	return refused
}

// record keeps what res, Redis's answer to a request r sent at sent (on
// the cache's clock), says of its bucket fp: if it leaves no token, the
// bucket's state is at least sent + res.ResetAfter from then on (a
// calendar quota's reset is then at least that far, and it has spent at
// least what res does not leave); for a ban's question answered "not
// banned", with leases, that it is not banned.
func (c *refusals) record(fp uint64, r ratelimit.BatchItem, sent int64, res ratelimit.Result) {
	ban := r.Policy.Algorithm == algo.Ban
	switch {
	case ban && r.Cost == 0 && res.Allowed:
		if c.clearFor > 0 {
			c.slots[fp%refusalSlots].Store(&refusal{fp: fp, limit: r.Policy.Limit, ask: sent + c.clearFor})
		}
		return
	case res.Allowed && res.Remaining > 0:
		return // the next request of cost 1 would be allowed: nothing to refuse
	}
	e := &refusal{fp: fp, limit: r.Policy.Limit, until: sent + int64(res.ResetAfter)}
	if r.Policy.Limit.Interval() == 0 {
		e.spent = r.Policy.Limit.Burst() - res.Remaining
	}
	e.ask = min(e.until, sent+recheck)
	c.slots[fp%refusalSlots].Store(e)
}

// forget drops the bound of the bucket fp: a give-back lowers the state
// below it.
func (c *refusals) forget(fp uint64) {
	slot := &c.slots[fp%refusalSlots]
	if e := slot.Load(); e != nil && e.fp == fp {
		slot.CompareAndSwap(e, nil)
	}
}
