package grpclimit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
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

// refusal returns the status of a call that res refused:
// RESOURCE_EXHAUSTED naming the refusing policies, with a RetryInfo of the
// wait and a QuotaFailure of a violation per refusing policy.
func refusal(res ratelimit.Result) *status.Status {
	var names []string
	qf := &errdetails.QuotaFailure{}
	for _, r := range refusing(res) {
		names = append(names, r.Policy.Name)
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
			Subject:     r.Policy.Name,
			Description: fmt.Sprintf("%s: %v; retry after %v", r.Policy.Name, r.Policy.Limit, retryDelay(r.RetryAfter)),
		})
	}
	st := status.New(codes.ResourceExhausted, "rate limited by policy "+strings.Join(names, ", "))
	details := []protoadapt.MessageV1{qf}
	if res.RetryAfter > 0 { // else no wait allows it: no RetryInfo, which would say "now"
		details = []protoadapt.MessageV1{&errdetails.RetryInfo{RetryDelay: durationpb.New(retryDelay(res.RetryAfter))}, qf}
	}
	if d, err := st.WithDetails(details...); err == nil {
		st = d
	}
	return st
}

// refusing returns the refusing results of res: each policy's that
// refused, or res itself for a Limiter of one policy.
func refusing(res ratelimit.Result) []ratelimit.Result {
	var out []ratelimit.Result
	for _, r := range res.Results {
		if !r.Allowed && r.Policy != nil && !r.Policy.DryRun {
			out = append(out, r)
		}
	}
	if len(out) == 0 && res.Policy != nil {
		out = append(out, res)
	}
	return out
}

// unavailable returns the status of a call that could not be decided
// because the store failed: UNAVAILABLE, with a RetryInfo of a second.
func unavailable(msg string) *status.Status {
	st := status.New(codes.Unavailable, msg)
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)}); err == nil {
		st = d
	}
	return st
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
	case errors.Is(err, ratelimit.ErrWaitAbandoned):
		return unavailable("ratelimit: the call left before its turn")
	case errors.Is(err, ratelimit.ErrStore):
		return unavailable("ratelimit: the rate limiter is unavailable")
	}
	return status.New(codes.Internal, "ratelimit: the call could not be limited")
}
