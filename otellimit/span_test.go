package otellimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/tokenfair/ratelimit"
)

// traced runs each request of r (one client each) in a span of its own,
// recorded, and returns the spans with their status codes.
func traced(t *testing.T, r *rig, clients ...string) ([]sdktrace.ReadOnlySpan, []int) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var codes []int
	for _, c := range clients {
		ctx, span := tp.Tracer("test").Start(context.Background(), "GET /")
		codes = append(codes, r.getContext(ctx, c))
		span.End()
	}
	spans := rec.Ended()
	require.Len(t, spans, len(clients))
	return spans, codes
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

// spanOf is what a span says of its request: its attributes, and its
// events with theirs.
type spanOf struct {
	attrs  map[string]string
	events map[string]map[string]string
}

func said(s sdktrace.ReadOnlySpan) spanOf {
	got := spanOf{attrs: attrMap(s.Attributes())}
	for _, e := range s.Events() {
		if got.events == nil {
			got.events = map[string]map[string]string{}
		}
		got.events[e.Name] = attrMap(e.Attributes)
	}
	return got
}

func policyResult(policy, result string) map[string]string {
	m := map[string]string{"rate_limiting.result": result}
	if policy != "" {
		m["rate_limiting.policy"] = policy
	}
	return m
}

// TestSpan: a recording span gets the policy and result of its request,
// and a refusal an event with the wait, in seconds.
func TestSpan(t *testing.T) {
	r := newRig(t, nil, nil, nil, ratelimit.Policy{Name: "api", Limit: ratelimit.Per(2, time.Minute)})
	spans, codes := traced(t, r, "a", "a", "a", "")
	assert.Equal(t, []int{200, 200, 429, 401}, codes)
	refused := policyResult("api", "limited")
	withWait := policyResult("api", "limited")
	withWait["rate_limiting.retry_after"] = "30"
	assert.Equal(t, []spanOf{
		{attrs: policyResult("api", "allowed")},
		{attrs: policyResult("api", "allowed")},
		{attrs: refused, events: map[string]map[string]string{"rate_limiting.refused": withWait}},
		{attrs: policyResult("", "invalid")},
	}, []spanOf{said(spans[0]), said(spans[1]), said(spans[2]), said(spans[3])})
}

// TestSpanOutcomes: an allowed request that a dry-run policy would have
// refused is marked so, by that policy; a ban names the punished policy.
func TestSpanOutcomes(t *testing.T) {
	r := newRig(t, nil, nil, nil,
		ratelimit.Policy{Name: "api", Limit: ratelimit.Per(10, time.Minute)},
		ratelimit.Policy{Name: "shadow", Limit: ratelimit.Per(1, time.Minute), DryRun: true})
	spans, _ := traced(t, r, "a", "a")
	assert.Equal(t, "allowed", said(spans[0]).attrs["rate_limiting.result"])
	assert.Equal(t, policyResult("shadow", "dry_run_limited"), said(spans[1]).attrs)
	assert.Empty(t, said(spans[1]).events, "not refused")

	r = newRig(t, nil, nil, nil, ratelimit.Policy{Name: "login", Limit: ratelimit.Per(1, time.Hour),
		Penalty: ratelimit.Penalty{After: 1, For: time.Hour}})
	spans, _ = traced(t, r, "a", "a", "a")
	assert.Equal(t, policyResult("login", "banned"), said(spans[1]).attrs, "the refusal that bans")
	assert.Equal(t, policyResult("login", "banned"), said(spans[2]).attrs)
	assert.Contains(t, said(spans[2]).events, "rate_limiting.refused")
}

// spy is a span that counts what is set on it.
type spy struct {
	noop.Span
	recording bool
	calls     int
}

func (s *spy) IsRecording() bool                     { return s.recording }
func (s *spy) SetAttributes(...attribute.KeyValue)   { s.calls++ }
func (s *spy) AddEvent(string, ...trace.EventOption) { s.calls++ }

// TestSpanNotRecording: a span that is not recording is left alone, the
// refusals' included.
func TestSpanNotRecording(t *testing.T) {
	r := newRig(t, nil, nil, nil, ratelimit.Policy{Name: "api", Limit: ratelimit.Per(1, time.Minute)})
	for _, recording := range []bool{false, true} {
		s := &spy{recording: recording}
		ctx := trace.ContextWithSpan(context.Background(), s)
		client := fmt.Sprint(recording)
		r.getContext(ctx, client)
		r.getContext(ctx, client)
		r.getContext(ctx, "")
		if recording {
			assert.Equal(t, 4, s.calls, "allowed, refused (and its event), undecided")
		} else {
			assert.Zero(t, s.calls)
		}
	}
}

// TestNoKeyInAttributes: whatever the outcome, no metric's attributes, no
// span's and no event's carry the client's key.
func TestNoKeyInAttributes(t *testing.T) {
	const key = "sk-live-0123456789"
	r := newRig(t, nil, nil, &ratelimit.MiddlewareOptions{MaxInFlight: 5},
		ratelimit.Policy{Name: "api", Limit: ratelimit.Per(2, time.Minute), Penalty: ratelimit.Penalty{After: 1, For: time.Hour}},
		ratelimit.Policy{Name: "shadow", Limit: ratelimit.Per(1, time.Minute), DryRun: true})
	spans, codes := traced(t, r, key, key, key, key)
	assert.Equal(t, []int{200, 200, 429, 429}, codes, "allowed, allowed, limited, banned")
	var seen []string
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			seen = append(seen, kv.Value.Emit())
		}
		for _, e := range s.Events() {
			for _, kv := range e.Attributes {
				seen = append(seen, kv.Value.Emit())
			}
		}
	}
	for _, data := range r.collect(t) {
		seen = append(seen, fmt.Sprintf("%+v", data))
	}
	require.NotEmpty(t, seen)
	for _, v := range seen {
		assert.NotContains(t, v, key)
		assert.NotContains(t, v, "0123456789")
	}
	assert.Contains(t, fmt.Sprint(seen), "banned", "every outcome was seen")
}
