package grpclimit

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tokenfair/ratelimit"
)

// maxPushback is the longest wait told as a retry pushback: a longer one
// (a spent calendar quota) is told as -1, no automatic retry.
const maxPushback = 5 * time.Minute

// retryDelay returns d rounded up to the millisecond.
func retryDelay(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// pushback returns the value of the grpc-retry-pushback-ms trailer for a
// wait of d: its milliseconds, rounded up, or "-1" past maxPushback, or
// for a refusal that no wait allows (d ≤ 0): no automatic retry.
func pushback(d time.Duration) string {
	if d <= 0 || d > maxPushback {
		return "-1"
	}
	return strconv.FormatInt(int64(retryDelay(d)/time.Millisecond), 10)
}

// refusal returns the answer to a call that res refused: the status
// RESOURCE_EXHAUSTED naming the refusing policies, with a RetryInfo of the
// wait and a QuotaFailure of a violation per refusing policy, and its
// pushback.
func refusal(res ratelimit.Result) *refused {
	wait := time.Duration(0) // no wait allows it: no RetryInfo, which would say "now"
	if res.RetryAfter > 0 {
		wait = retryDelay(res.RetryAfter)
	}
	var one *ratelimit.Policy
	n := 0
	eachRefusing(res, func(p *ratelimit.Policy) { one, n = p, n+1 })
	if last := lastRefusal.Load(); n == 1 && last != nil && last.policy == one && last.wait == wait {
		return last
	}
	qf := &errdetails.QuotaFailure{}
	msg := "rate limited by policy "
	eachRefusing(res, func(p *ratelimit.Policy) {
		if len(qf.Violations) > 0 {
			msg += ", "
		}
		msg += p.Name
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
			Subject:     p.Name,
			Description: "the limit of policy " + p.Name + " is reached",
		})
	})
	sp := &spb.Status{Code: int32(codes.ResourceExhausted), Message: msg, Details: make([]*anypb.Any, 0, 2)}
	if wait > 0 {
		sp.Details = append(sp.Details, detail(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}))
	}
	sp.Details = append(sp.Details, detail(qf))
	st := status.FromProto(sp)
	rf := &refused{policy: one, wait: wait, st: st, err: st.Err(), pushback: []string{pushback(wait)}}
	if n == 1 {
		lastRefusal.Store(rf)
	}
	return rf
}

// lastRefusal is the last refusal by one policy: a flood of refusals by it
// with the same wait, to the millisecond (a client that retries at once,
// or many clients of one bucket), shares one status, error and pushback
// rather than building them each, which costs more than deciding.
var lastRefusal atomic.Pointer[refused]

// refused is a refusal's status, its error and its pushback, and the
// policy and the wait it tells. It is shared: do not modify it.
type refused struct {
	policy   *ratelimit.Policy
	wait     time.Duration
	st       *status.Status
	err      error    // st.Err()
	pushback []string // the value of grpc-retry-pushback-ms
}

// eachRefusing calls f with each policy whose refusal of res counts: each
// that refused, not in dry run, or res's own for a Limiter of one policy.
func eachRefusing(res ratelimit.Result, f func(*ratelimit.Policy)) {
	n := 0
	for _, r := range res.Results {
		if !r.Allowed && r.Policy != nil && !r.Policy.DryRun {
			f(r.Policy)
			n++
		}
	}
	if n == 0 && res.Policy != nil {
		f(res.Policy)
	}
}

// detail returns m as a status detail; nil if it cannot be encoded, which
// a message of this package always can.
func detail(m proto.Message) *anypb.Any {
	a, _ := anypb.New(m)
	return a
}

// unavailable returns the status of a call that could not be decided
// because the store failed: UNAVAILABLE, with a RetryInfo of a second.
func unavailable(msg string) *status.Status {
	return status.FromProto(&spb.Status{Code: int32(codes.Unavailable), Message: msg,
		Details: []*anypb.Any{detail(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})}})
}

// failure returns the status of a call that could not be decided because
// of err: a fixed message for each kind of error, never err's text, which
// may quote a store's address or a client's value. OnError answers with it
// too.
func failure(err error) *status.Status {
	switch {
	case errors.Is(err, ratelimit.ErrMissingKey):
		return status.New(codes.Unauthenticated, "ratelimit: the call carries no client key")
	case errors.Is(err, ratelimit.ErrBadRequest):
		return status.New(codes.InvalidArgument, "ratelimit: the call cannot be limited as it is")
	case errors.Is(err, ratelimit.ErrStore):
		return unavailable("ratelimit: the rate limiter is unavailable")
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded): // it left a shaping queue
		return unavailable("ratelimit: the call left before its turn")
	}
	return status.New(codes.Internal, "ratelimit: the call could not be limited")
}
