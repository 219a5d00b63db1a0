package ratelimit

import (
	"math/bits"
	"time"
)

// Result is the outcome of one decision; the zero Result has no Policy.
// For a [Limiter] of several policies its fields are the binding policy's
// (docs/algorithms.md#several-policies).
type Result struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Degraded reports that the store failed and a fallback (the failover
	// package) decided, unchecked, with no figures unless Local is set.
	Degraded bool
	// Local reports, with Degraded, that the fallback decided in a bucket
	// of its own (failover's Local mode): Policy, a copy with this
	// instance's share of the quota, and the figures are that bucket's.
	Local bool
	// Policy is the policy that decided. It is shared: do not modify it.
	Policy *Policy
	// Remaining is the whole tokens left after the decision; never negative.
	Remaining int64
	// RetryAfter is how long until the same request would be allowed; 0
	// when allowed, or when no wait can allow it.
	RetryAfter time.Duration
	// ResetAfter is how long until the bucket is full again.
	ResetAfter time.Duration
	// Delay is how long an allowed request must wait before it proceeds
	// (LeakyShape; with several policies the longest wait); 0 otherwise.
	Delay time.Duration
	// Until is what a RefundStore needs to give tokens back exactly.
	Until int64
	// Results has every policy's result, in order, for a Limiter of several
	// policies, a dry-run one or a Penalty, else nil; those not Allowed
	// refused (or, dry-run, would have). A ban's refusal has the ban's
	// alone, its Policy named POLICY/ban. Shared: do not modify it.
	Results []Result
}

// bindsOver reports whether r binds rather than b, of one request's
// results: a refusal with a longer wait, or else less left relative to
// its quota (Remaining ÷ burst: policies of several units compare).
func (r Result) bindsOver(b Result) bool {
	if !r.Allowed {
		return b.Allowed || r.RetryAfter > b.RetryAfter
	}
	return b.Allowed && lessShare(r, b)
}

// lessShare reports whether r has less left of its burst than b, exactly:
// r.Remaining × b's burst < b.Remaining × r's burst, in 128 bits.
func lessShare(r, b Result) bool {
	rq, bq := burstOf(r), burstOf(b)
	rh, rl := bits.Mul64(uint64(r.Remaining), uint64(bq))
	bh, bl := bits.Mul64(uint64(b.Remaining), uint64(rq))
	return rh < bh || rh == bh && rl < bl
}

// burstOf returns the burst of r's policy, or 1 without one.
func burstOf(r Result) int64 {
	if r.Policy == nil {
		return 1
	}
	return max(r.Policy.Limit.burst, 1)
}

// combine makes the Result of a request decided by several policies: the
// binding policy's result, the lists, and every policy's result.
func (l *Limiter) combine(results []Result, allowed bool) Result {
	var delay time.Duration
	for _, i := range l.enforce {
		delay = max(delay, results[i].Delay)
	}
	idx := l.enforce
	if len(idx) == 0 {
		idx = l.dryRun
	}
	res := results[binding(results, idx)]
	res.Allowed = allowed
	res.Delay = 0
	if allowed {
		res.RetryAfter, res.Delay = 0, delay
	}
	res.Results = results
	return res
}

// binding returns the index, among idx, of the result that binds (see
// bindsOver), the first of equals.
func binding(results []Result, idx []int) int {
	best := idx[0]
	for _, i := range idx[1:] {
		if results[i].bindsOver(results[best]) {
			best = i
		}
	}
	return best
}
