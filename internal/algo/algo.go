// Package algo holds the rate-limiting algorithms as pure functions of
// (state, now, limit, cost). Times and durations are int64 nanoseconds; a
// state of 0 (or any state at or before now) is a full bucket.
package algo

import (
	"time"

	"github.com/tokenfair/ratelimit"
)

// Decision is the outcome of one algorithm step, in nanoseconds.
type Decision struct {
	Allowed    bool
	State      int64 // state to store; the input state when refused
	Remaining  int64
	RetryAfter int64
	ResetAfter int64
	Delay      int64
}

// TokenBucket is GCRA. state is the theoretical arrival time (TAT): the time
// at which the bucket is full again. With τ = burst × interval, the bucket
// holds (now + τ − max(TAT, now)) / interval tokens, so a request of cost n
// is allowed iff max(TAT, now) + n × interval − now ≤ τ, and then TAT moves
// to max(TAT, now) + n × interval. This is the exact token-bucket decision
// in integer nanoseconds. A clock that goes backwards cannot add tokens:
// an earlier now only makes TAT − now larger.
func TokenBucket(state, now, interval, burst, cost int64) Decision {
	tau := burst * interval
	tat := max(state, now)
	d := Decision{State: state}
	if cost > burst {
		// Never allowed; no wait changes that.
	} else if cost == 0 {
		d.Allowed = true // a cost of 0 only reads
	} else if next := tat + cost*interval; next-now <= tau {
		d.Allowed = true
		d.State = next
		tat = next
	} else {
		d.RetryAfter = next - tau - now
	}
	d.ResetAfter = tat - now
	d.Remaining = min(max((tau-d.ResetAfter)/interval, 0), burst)
	return d
}

// Shape is the leaky bucket as a queue. state is the time at which the
// queue is empty: the earliest start of the next request. A request arriving
// at now starts at max(state, now), waits start − now, and moves state on by
// cost × interval. It is admitted iff that wait is at most bound, the queue's
// room (burst × interval, or less: see Decide); otherwise it is refused at
// once and changes nothing. The first immediate × interval of every wait is
// forgiven (nginx's delay=N: the first N queued requests proceed at once).
func Shape(state, now, interval, burst, cost, bound, immediate int64) Decision {
	start := max(state, now)
	wait := start - now
	d := Decision{State: state}
	switch {
	case cost > burst:
		// Never allowed.
	case cost == 0:
		d.Allowed = true
	case wait <= bound:
		d.Allowed = true
		d.Delay = max(wait-immediate*interval, 0)
		d.State = start + cost*interval
		start = d.State
	default:
		d.RetryAfter = wait - bound
	}
	d.ResetAfter = start - now
	// Remaining: how many more requests of cost 1 would be admitted now.
	if next := d.ResetAfter; next <= bound {
		d.Remaining = min((bound-next)/interval+1, burst)
	}
	return d
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
// values: a Result is large, and copying it was much of a decision's cost.) A state at or before now
// carries no information (a full token bucket, an empty queue), so a store
// may forget it. The caller has validated p and cost.
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
	var d Decision
	switch p.Algorithm {
	case ratelimit.LeakyShape:
		d = Shape(state, now, iv, burst, cost, ShapeBound(*p), p.Immediate)
	default: // TokenBucket and LeakyPolice make the same decisions.
		d = TokenBucket(state, now, iv, burst, cost)
	}
	*res = ratelimit.Result{
		Allowed:    d.Allowed,
		Policy:     p.Name,
		Limit:      p.Limit,
		Remaining:  d.Remaining,
		RetryAfter: time.Duration(d.RetryAfter),
		ResetAfter: time.Duration(d.ResetAfter),
		Delay:      time.Duration(d.Delay),
	}
	return d.State
}
