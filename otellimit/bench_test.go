package otellimit_test

import (
	"context"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tokenfair/ratelimit"
)

// BenchmarkObserve is Observe's own cost for an allowed decision of two
// policies, with the SDK's meter provider: in a request with no span, with
// a span that is not recording (sampled out), and with a recording one.
// The middleware's side by side with Prometheus is bench's
// BenchmarkObserve.
func BenchmarkObserve(b *testing.B) {
	s := newSDK(b)
	lim := roomy(b)
	res, err := lim.Take(context.Background(), "k", 1)
	if err != nil || !res.Allowed {
		b.Fatal(res, err)
	}
	ev := ratelimit.Event{Limiter: lim, KeyHash: 1, Result: res, Elapsed: 1000}
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{
		{"no-span", nil},
		{"span-not-recording", sdktrace.NeverSample()},
		{"span-recording", sdktrace.AlwaysSample()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			if tc.sampler != nil {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tc.sampler))
				defer tp.Shutdown(context.Background())
				c, sp := tp.Tracer("bench").Start(ctx, "GET /")
				defer sp.End()
				ctx = c
			}
			r := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
			b.ReportAllocs()
			for b.Loop() {
				s.m.Observe(r, ev)
			}
		})
	}
}
