// Package algo holds the rate-limiting algorithms as pure functions of
// (state, now, limit, cost). Times and durations are int64 nanoseconds; a
// state of 0 (or any state at or before now) is a full bucket.
package algo

import (
	"time"

	"github.com/tokenfair/ratelimit"
)

// tokenBucket is GCRA. state is the theoretical arrival time (TAT): the time
// at which the bucket is full again. With τ = burst × interval, the bucket
// holds (now + τ − max(TAT, now)) / interval tokens, so a request of cost n
// is allowed iff max(TAT, now) + n × interval − now ≤ τ, and then TAT moves
// to max(TAT, now) + n × interval. This is the exact token-bucket decision
// in integer nanoseconds. A clock that goes backwards cannot add tokens:
// an earlier now only makes TAT − now larger. It returns the state to
// store as next (the input state when refused).
//
// The results are separate values, so that they travel in registers: a
// struct of six fields goes through memory, and copying it was half of
// Decide's cost.
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

// shape is the leaky bucket as a queue. state is the time at which the
// queue is empty: the earliest start of the next request. A request arriving
// at now starts at max(state, now), waits start − now, and moves state on by
// cost × interval. It is admitted iff that wait is at most bound, the queue's
// room (burst × interval, or less: see Decide); otherwise it is refused at
// once and changes nothing. The first immediate × interval of every wait is
// forgiven (nginx's delay=N: the first N queued requests proceed at once).
// Its results are separate values, as tokenBucket's are.
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

// ShapeBound returns the longest wait a LeakyShape policy admits: the
// queue's room, Burst × Interval, or less when MaxDelay is set.
func ShapeBound(p ratelimit.Policy) int64 {
	bound := p.Limit.Burst * int64(p.Limit.Interval)
	if p.MaxDelay > 0 {
		bound = min(bound, int64(p.MaxDelay)+p.Immediate*int64(p.Limit.Interval))
	}
	return bound
}

// Decide applies p's algorithm to state at time now (Unix nanoseconds),
// writes the Result to res and returns the state to store. (Pointers, not
// values: copying a Result through frames was much of a decision's cost.) A
// state at or before now carries no information (a full token bucket, an
// empty queue), so a store may forget it. The caller has validated p and
// cost.
//
// A negative cost gives back −cost tokens taken earlier (a refund, when
// another policy refused the request): the state moves back by −cost
// intervals, never to before now, and the result reports the state after.
func Decide(p *ratelimit.Policy, state, now, cost int64, res *ratelimit.Result) int64 {
	iv, burst := int64(p.Limit.Interval), p.Limit.Burst
	if cost < 0 {
		if state > now {
			state = max(state+cost*iv, now)
		}
		cost = 0
	}
	var allowed bool
	var next, remaining, retryAfter, resetAfter, delay int64
	if p.Algorithm == ratelimit.LeakyShape {
		allowed, next, remaining, retryAfter, resetAfter, delay = shape(state, now, iv, burst, cost, ShapeBound(*p), p.Immediate)
	} else { // TokenBucket and LeakyPolice make the same decisions.
		allowed, next, remaining, retryAfter, resetAfter = tokenBucket(state, now, iv, burst, cost)
	}
	*res = ratelimit.Result{
		Allowed:    allowed,
		Policy:     p.Name,
		Limit:      p.Limit,
		Remaining:  remaining,
		RetryAfter: time.Duration(retryAfter),
		ResetAfter: time.Duration(resetAfter),
		Delay:      time.Duration(delay),
	}
	return next
}
