// Package algo is the pure int64 arithmetic of the root package's
// algorithms (the token bucket as GCRA, the shaping queue, a ban, a debt),
// in nanoseconds and tokens, with what it shares with the stores that run
// them natively (redisstore's script): the algorithms a Limiter keeps for
// its penalty boxes, and the shaping queue's bound.
package algo

import (
	"math"
	"math/bits"
)

// The Algorithm values of a penalty box's own policies, beyond the three a
// Policy may have (TokenBucket 0, LeakyPolice 1, LeakyShape 2).
const (
	// Ban: the state is the time a ban ends; cost 0 asks whether the key
	// is banned, a positive cost bans it for cost nanoseconds.
	Ban = 3
	// Strikes: a token bucket, decided as TokenBucket is, whose every
	// decision must be the store's own (no lease): the strikes and bans
	// that a penalty box counts.
	Strikes = 4
	// Debt: a settlement's charge of a request that cost more than it
	// reserved, to the bucket of the policy it copies (same name, the
	// key's limit in force): always allowed, it takes cost more tokens
	// past empty, exactly (saturated at the int64 limit); a calendar
	// quota's debt ends at its reset.
	Debt = 5
)

// ShapeBound returns the longest wait a LeakyShape policy of that interval,
// burst, MaxDelay and Immediate admits: the queue's room, burst × interval,
// or less when maxDelay is positive. All in nanoseconds but burst and
// immediate, which are tokens.
func ShapeBound(interval, burst, maxDelay, immediate int64) int64 {
	bound := burst * interval
	if maxDelay > 0 {
		bound = min(bound, maxDelay+immediate*interval)
	}
	return bound
}

// Add returns a + b, saturated at the int64 limits: a state or a span
// that would overflow stays at the farthest time an int64 holds.
func Add(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

// Mul returns a × b for a, b ≥ 0, saturated at math.MaxInt64: a cost in
// tokens times an interval.
func Mul(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// Bucket is GCRA: with τ = burst × interval and TAT = max(state, now),
// a request of cost n is allowed iff TAT + n × interval − now ≤ τ, and then
// the state moves to TAT + n × interval; a refusal keeps the state. A
// state however far ahead (a debt, or one kept under a longer limit than
// the one in force, or before the clock went back) counts as it is, so
// that RetryAfter is exact and nothing is forgiven. The results are
// separate values so that they travel in registers.
func Bucket(state, now, interval, burst, cost int64) (allowed bool, next, remaining, retryAfter, resetAfter int64) {
	tau, need := burst*interval, Mul(cost, interval)
	ahead := max(Add(state, -now), 0) // TAT − now
	next = state
	switch {
	case cost > burst:
		// Never allowed; no wait changes that.
	case cost == 0:
		allowed = true // a cost of 0 only reads
	case ahead <= tau-need:
		allowed = true
		ahead += need
		next = now + ahead
	default:
		retryAfter = Add(ahead, need-tau)
	}
	return allowed, next, left(tau, ahead, interval, burst), retryAfter, ahead
}

// left returns the whole tokens a bucket of depth tau holds when its state
// is ahead of now by ahead.
func left(tau, ahead, interval, burst int64) int64 {
	if ahead >= tau {
		return 0
	}
	return min((tau-ahead)/interval, burst)
}

// Owe is the settlement of a request that cost more than it reserved: it
// takes cost more tokens even past empty, exactly, so that the key's next
// requests wait until the debt is repaid; the state never moves back, and
// never past limit (the int64 limit for a rate, the end of a calendar
// quota's debt).
func Owe(state, now, interval, burst, cost, limit int64) (allowed bool, next, remaining, resetAfter int64) {
	tat := max(state, now)
	next = max(state, min(Add(tat, Mul(cost, interval)), limit))
	resetAfter = max(Add(next, -now), 0)
	return true, next, left(burst*interval, resetAfter, interval, burst), resetAfter
}

// DecideBan is a penalty box's ban: the state is the time the ban ends. Until
// then every request is refused and changes nothing; after it, a cost of 0
// asks, and a positive cost bans for cost nanoseconds from now. So of
// requests that race to ban a key, one bans it and the others are refused
// by its ban.
func DecideBan(state, now, cost int64) (allowed bool, next, retryAfter, resetAfter int64) {
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

// Shape is the leaky bucket as a queue: a request arriving at now starts at
// max(state, now), waits start − now, and moves the state on by cost ×
// interval. It is admitted iff that wait is at most bound; otherwise it is
// refused at once and changes nothing. The first immediate × interval of
// every wait is forgiven.
func Shape(state, now, interval, burst, cost, bound, immediate int64) (allowed bool, next, remaining, retryAfter, resetAfter, delay int64) {
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
