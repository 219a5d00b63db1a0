package ratelimit

import (
	"time"

	"github.com/tokenfair/ratelimit/internal/algo"
)

// Decide applies p's algorithm to a bucket of state state (0 if never seen)
// at now, in Unix nanoseconds, for cost tokens: it returns the decision and
// the state to keep, unchanged on a refusal. The state is when the bucket
// is full again (a LeakyShape queue empty, a ban over), so a store may
// forget a bucket when next ≤ now and keep it for next − now at most. p
// must be valid and cost at most its burst; a negative cost counts as 0.
// Decide is pure and safe for concurrent use; docs/algorithms.md derives it.
func (p *Policy) Decide(state, now, cost int64) (res Result, next int64) {
	iv, burst := int64(p.Limit.interval), p.Limit.burst
	cost = max(cost, 0)
	var allowed bool
	var remaining, retryAfter, resetAfter, delay int64
	switch p.Algorithm {
	case LeakyShape:
		allowed, next, remaining, retryAfter, resetAfter, delay = shape(state, now, iv, burst, cost, p.shapeBound(), p.Immediate)
	case ban:
		allowed, next, retryAfter, resetAfter = decideBan(state, now, cost)
	default: // TokenBucket, LeakyPolice and strikes make the same decisions.
		allowed, next, remaining, retryAfter, resetAfter = tokenBucket(state, now, iv, burst, cost)
	}
	return Result{
		Allowed:    allowed,
		Policy:     p,
		Remaining:  remaining,
		RetryAfter: time.Duration(retryAfter),
		ResetAfter: time.Duration(resetAfter),
		Delay:      time.Duration(delay),
		Until:      next,
	}, next
}

// Refund returns the state of a bucket of state state at now after it is
// given back cost tokens that an allowed decision of p spent, whose tokens
// are earned back at end: it moves the state back by at most cost
// intervals and end − now, never to before now. A ban's state never moves
// back. [RefundStore] says what end is; docs/algorithms.md derives it.
func (p *Policy) Refund(state, now, cost, end int64) (next int64) {
	if cost <= 0 || p.Algorithm == ban {
		return state
	}
	give := min(end-now, cost*int64(p.Limit.interval), state-now)
	if give <= 0 {
		return state
	}
	return state - give
}

// tokenBucket is GCRA: with τ = burst × interval and TAT = max(state, now),
// a request of cost n is allowed iff TAT + n × interval − now ≤ τ, and then
// the state moves to TAT + n × interval. A clock that goes backwards cannot
// add tokens. The results are separate values so that they travel in
// registers.
func tokenBucket(state, now, interval, burst, cost int64) (allowed bool, next, remaining, retryAfter, resetAfter int64) {
	tau := burst * interval
	tat := max(state, now)
	next = state
	switch {
	case cost > burst:
		// Never allowed; no wait changes that.
	case cost == 0:
		allowed = true // a cost of 0 only reads
	case tat+cost*interval-now <= tau:
		allowed = true
		next = tat + cost*interval
		tat = next
	default:
		retryAfter = tat + cost*interval - tau - now
	}
	resetAfter = tat - now
	remaining = min(max((tau-resetAfter)/interval, 0), burst)
	return allowed, next, remaining, retryAfter, resetAfter
}

// decideBan is a penalty box's ban: the state is the time the ban ends. Until
// then every request is refused and changes nothing; after it, a cost of 0
// asks, and a positive cost bans for cost nanoseconds from now. So of
// requests that race to ban a key, one bans it and the others are refused
// by its ban.
func decideBan(state, now, cost int64) (allowed bool, next, retryAfter, resetAfter int64) {
	next = state
	allowed = state <= now
	if allowed && cost > 0 {
		next = now + cost
	}
	resetAfter = max(next-now, 0)
	if !allowed {
		retryAfter = resetAfter
	}
	return allowed, next, retryAfter, resetAfter
}

// shape is the leaky bucket as a queue: a request arriving at now starts at
// max(state, now), waits start − now, and moves the state on by cost ×
// interval. It is admitted iff that wait is at most bound; otherwise it is
// refused at once and changes nothing. The first immediate × interval of
// every wait is forgiven.
func shape(state, now, interval, burst, cost, bound, immediate int64) (allowed bool, next, remaining, retryAfter, resetAfter, delay int64) {
	start := max(state, now)
	wait := start - now
	next = state
	switch {
	case cost > burst:
		// Never allowed.
	case cost == 0:
		allowed = true
	case wait <= bound:
		allowed = true
		delay = max(wait-immediate*interval, 0)
		next = start + cost*interval
		start = next
	default:
		retryAfter = wait - bound
	}
	resetAfter = start - now
	// Remaining: how many more requests of cost 1 would be admitted now.
	if resetAfter <= bound {
		remaining = min((bound-resetAfter)/interval+1, burst)
	}
	return allowed, next, remaining, retryAfter, resetAfter, delay
}

// shapeBound returns the longest wait a LeakyShape policy admits: the
// queue's room, burst × interval, or less when MaxDelay is set.
func (p *Policy) shapeBound() int64 {
	return algo.ShapeBound(int64(p.Limit.interval), p.Limit.burst, int64(p.MaxDelay), p.Immediate)
}
