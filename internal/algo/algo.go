// Package algo holds what the root package's algorithms share with the
// stores that run them natively (redisstore's script): the algorithms a
// Limiter keeps for its penalty boxes, and the shaping queue's bound.
package algo

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
	// reserved, to the bucket of the policy it copies (same name, same
	// limit): always allowed, it takes cost more tokens past empty, at
	// most to a burst of debt (a state of now + 2 × burst × interval).
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
