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
	} else if next := tat + cost*interval; next-now <= tau {
		d.Allowed = true
		if cost > 0 {
			d.State = next
			tat = next
		}
	} else {
		d.RetryAfter = next - tau - now
	}
	d.ResetAfter = tat - now
	d.Remaining = min(max((tau-d.ResetAfter)/interval, 0), burst)
	return d
}

// Decide applies p's algorithm to state at time now (Unix nanoseconds) and
// returns the state to store and the Result. The caller has validated p and
// cost.
func Decide(p ratelimit.Policy, state, now, cost int64) (int64, ratelimit.Result) {
	d := TokenBucket(state, now, int64(p.Limit.Interval), p.Limit.Burst, cost)
	return d.State, ratelimit.Result{
		Allowed:    d.Allowed,
		Policy:     p.Name,
		Limit:      p.Limit,
		Remaining:  d.Remaining,
		RetryAfter: time.Duration(d.RetryAfter),
		ResetAfter: time.Duration(d.ResetAfter),
		Delay:      time.Duration(d.Delay),
	}
}
