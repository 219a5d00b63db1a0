package ratelimit

import (
	"math"
	"time"

	"github.com/tokenfair/ratelimit/internal/algo"
)

// Decide applies p's algorithm to a bucket of state state (0 if never seen)
// at now, in Unix nanoseconds, for cost tokens: it returns the decision and
// the state to keep, unchanged on a refusal. The state is when the bucket
// is full again, so a store may forget a bucket when next ≤ now and keep
// it for next − now at most. p must be valid and cost at most its burst
// (but for a charge past empty); a negative cost counts as 0; sums
// saturate at the int64 limit. Decide is pure and safe for concurrent use;
// docs/algorithms.md derives it.
func (p *Policy) Decide(state, now, cost int64) (res Result, next int64) {
	if p.Limit.cal != rate {
		return p.decideQuota(state, now, cost)
	}
	iv, burst := int64(p.Limit.interval), p.Limit.burst
	cost = max(cost, 0)
	var allowed bool
	var remaining, retryAfter, resetAfter, delay int64
	switch p.Algorithm {
	case LeakyShape:
		allowed, next, remaining, retryAfter, resetAfter, delay = algo.Shape(state, now, iv, burst, cost, p.shapeBound(), p.Immediate)
	case ban:
		allowed, next, retryAfter, resetAfter = algo.DecideBan(state, now, cost)
	case debt:
		allowed, next, remaining, resetAfter = algo.Owe(state, now, iv, burst, cost, math.MaxInt64)
	default: // TokenBucket, LeakyPolice and strikes make the same decisions.
		allowed, next, remaining, retryAfter, resetAfter = algo.Bucket(state, now, iv, burst, cost)
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
	iv := int64(p.Limit.interval)
	if p.Limit.cal != rate {
		now, iv = p.quotaEnd(now), 1 // see decideQuota
	}
	give := min(end-now, algo.Mul(cost, iv), state-now)
	if give <= 0 {
		return state
	}
	return state - give
}

// decideQuota is a calendar quota's decision: the token bucket of a burst
// of n and an interval of 1 ns, decided at the end E of the period that
// holds now rather than at now, so that the state is E + the tokens spent
// in the period, and none earn back until E, when the state falls behind
// the next period's end: a bucket full again. A debt stops at E + 2n, an
// empty bucket still at the reset, so that none carries over to the next
// period. ResetAfter is the time until E, whatever was spent.
func (p *Policy) decideQuota(state, now, cost int64) (Result, int64) {
	end, n := p.quotaEnd(now), p.Limit.burst
	cost = max(cost, 0)
	var allowed bool
	var next, remaining int64
	if p.Algorithm == debt {
		allowed, next, remaining, _ = algo.Owe(state, end, 1, n, cost, end+2*n)
	} else {
		allowed, next, remaining, _, _ = algo.Bucket(state, end, 1, n, cost)
	}
	res := Result{Allowed: allowed, Policy: p, Remaining: remaining, ResetAfter: time.Duration(end - now), Until: next}
	if !allowed && cost <= n {
		res.RetryAfter = res.ResetAfter
	}
	return res, next
}

// wouldAllow reports whether cost would have been allowed where res, a
// look at the bucket (cost 0) at some time, was, and after what wait.
func (p *Policy) wouldAllow(res Result, cost int64) (bool, time.Duration) {
	if p.Limit.cal != rate {
		if cost <= res.Remaining {
			return true, 0
		}
		if cost <= p.Limit.burst {
			return false, res.ResetAfter
		}
		return false, 0
	}
	// The algorithm depends on how far the state is ahead of now, which
	// the look tells.
	would, _ := p.Decide(int64(res.ResetAfter), 0, cost)
	return would.Allowed, would.RetryAfter
}

// shapeBound returns the longest wait a LeakyShape policy admits: the
// queue's room, burst × interval, or less when MaxDelay is set.
func (p *Policy) shapeBound() int64 {
	return algo.ShapeBound(int64(p.Limit.interval), p.Limit.burst, int64(p.MaxDelay), p.Immediate)
}
