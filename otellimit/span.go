package otellimit

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/outcome"
)

// refusedEvent is the name of the span event of a refusal.
const refusedEvent = "rate_limiting.refused"

// markUndecided sets the result of a request that could not be decided on
// its span, if that is recording.
func markUndecided(ctx context.Context, res outcome.Outcome) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(resultKey.String(outcome.Names[res]))
	}
}

// markRefused sets the policy and result of a refusal on the request's
// span, if that is recording, and adds the event rate_limiting.refused.
func markRefused(ctx context.Context, policy string, res outcome.Outcome, r ratelimit.Result) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{policyKey.String(policy), resultKey.String(outcome.Names[res])}
	span.SetAttributes(attrs...)
	span.AddEvent(refusedEvent, trace.WithAttributes(append(attrs, retryAfterKey.Float64(r.RetryAfter.Seconds()))...))
}

// markDecided marks the span of a request decided by the limiter of
// policies, if it is recording: a refusal as markRefused does; an allowed
// request with the first policy that would have refused it (dry-run),
// else the first that a fallback decided (fallback or local), else the
// binding policy.
func markDecided(ctx context.Context, policies []ratelimit.Policy, res ratelimit.Result) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	name := ""
	if res.Policy != nil {
		name = res.Policy.Name
	}
	if !res.Allowed {
		markRefused(ctx, name, outcome.Limited, res)
		return
	}
	mark := outcome.Allowed
	for i := range policies {
		own := res
		if res.Results != nil {
			own = res.Results[i]
		}
		switch o := outcome.Of(&policies[i], own); {
		case o == outcome.DryRunLimited && mark != outcome.DryRunLimited, (o == outcome.Fallback || o == outcome.Local) && mark == outcome.Allowed:
			mark, name = o, policies[i].Name
		}
	}
	span.SetAttributes(policyKey.String(name), resultKey.String(outcome.Names[mark]))
}
