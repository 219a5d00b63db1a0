// Package algo holds what the root package's algorithms share with the
// stores that run them natively (redisstore's script): the algorithms a
// Limiter keeps for its penalty boxes, and the shaping queue's bound.
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
