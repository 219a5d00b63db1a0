package ratelimit

import "time"

// Result is the outcome of one decision. For a [Limiter] of several
// policies its fields are the binding policy's: the refusing one with the
// longest wait, else the one with the fewest tokens left. The zero Result
// has no Policy.
type Result struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Degraded reports that the store failed and a fallback decided (see
	// the failover package); no rate-limit header field is written for it.
	Degraded bool
	// Policy is the policy that decided. It is shared: do not modify it.
	Policy *Policy
	// Remaining is the whole tokens left after the decision, also after a
	// refusal; never negative.
	Remaining int64
	// RetryAfter is how long until the same request would be allowed; 0
	// when allowed, or when no wait can allow it.
	RetryAfter time.Duration
	// ResetAfter is how long until the bucket is full again.
	ResetAfter time.Duration
	// Delay is how long an allowed request must wait before it proceeds
	// (LeakyShape; with several policies the longest wait); 0 otherwise.
	Delay time.Duration
	// Until is what a store's Refund needs to give the tokens back exactly
	// (see RefundStore); a Limiter hands it back untouched.
	Until int64

	// Results has every policy's result, in the Limiter's order, when it
	// has several policies, a dry-run one or a Penalty, else nil; those not Allowed
	// refused (a dry-run one would have). A ban's refusal has the ban's
	// result alone, its Policy named POLICY/ban. Shared: do not modify it.
	Results []Result
}

// bindsOver reports whether r binds rather than b, of one request's
// results: a refusal with a longer wait, or else fewer tokens left.
func (r Result) bindsOver(b Result) bool {
	return !r.Allowed && (b.Allowed || r.RetryAfter > b.RetryAfter) || r.Allowed && b.Allowed && r.Remaining < b.Remaining
}
