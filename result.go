package ratelimit

import "time"

// Result is the outcome of one decision. For a [Limiter] of several
// policies, its fields describe the binding policy: the refusing policy
// with the longest wait when the request is refused, else the policy with
// the fewest tokens left; Results has every policy's result. The zero
// Result has no Policy.
type Result struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Degraded reports that the store failed and a fallback decided instead
	// (see the failover package). The middleware writes no rate-limit
	// header fields for such a result.
	Degraded bool
	// Policy is the policy that decided. It is shared: do not modify it.
	Policy *Policy
	// Remaining is the number of whole tokens left after the decision, also
	// after a refusal. It is never negative.
	Remaining int64
	// RetryAfter is how long until the same request would be allowed: 0 when
	// allowed, and 0 for a cost that can never be allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the bucket is full again.
	ResetAfter time.Duration
	// Delay is how long an allowed request must wait before it proceeds
	// (LeakyShape; with several policies the longest wait); 0 otherwise.
	Delay time.Duration
	// Until is what a store's Refund needs to give back the tokens of an
	// allowed request exactly: the bucket's state after the decision plus
	// its credit, in Unix nanoseconds by the store's clock ([RefundStore]).
	// A Limiter hands it back to the store untouched.
	Until int64

	// Results has every policy's result, in the Limiter's order, when the
	// Limiter has more than one policy, or a dry-run one; nil otherwise.
	// The policies whose result is not Allowed refused the request (a
	// dry-run one would have). A request refused by a penalty box's ban
	// has the ban's result alone, whose Policy is named POLICY/ban. Set by
	// a Limiter; shared: do not modify it.
	Results []Result
}

// bindsOver reports whether r binds rather than b, of one request's
// results: a refusal with a longer wait, or else fewer tokens left.
func (r Result) bindsOver(b Result) bool {
	return !r.Allowed && (b.Allowed || r.RetryAfter > b.RetryAfter) || r.Allowed && b.Allowed && r.Remaining < b.Remaining
}
