package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/metrics"
	"github.com/tokenfair/ratelimit/nethttp"
	"github.com/tokenfair/ratelimit/otellimit"
)

// BenchmarkObserve measures an allowed request through nethttp and the
// middleware (one policy, one key, a reused recorder) with no observer, with
// the Prometheus metrics, with the OpenTelemetry metrics on the SDK's meter
// provider (read by a ManualReader, as a PeriodicReader would between its
// exports), and with those and a recording span in the request's context.
func BenchmarkObserve(b *testing.B) {
	prom, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	otel, err := otellimit.New(mp)
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer tp.Shutdown(context.Background())
	traced, span := tp.Tracer("bench").Start(context.Background(), "GET /")
	defer span.End()

	for _, tc := range []struct {
		name    string
		observe func(*http.Request, ratelimit.Event)
		ctx     context.Context
	}{
		{"none", nil, context.Background()},
		{"prometheus", prom.Observe, context.Background()},
		{"otel", otel.Observe, context.Background()},
		{"otel-span", otel.Observe, traced},
	} {
		b.Run(tc.name, func(b *testing.B) {
			store, err := memorystore.New(nil)
			if err != nil {
				b.Fatal(err)
			}
			lim, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(1_000_000).WithBurst(1_000_000_000)})
			if err != nil {
				b.Fatal(err)
			}
			mw, err := ratelimit.NewMiddleware(lim, func(*http.Request) (string, error) { return "k", nil },
				&ratelimit.MiddlewareOptions{Observe: tc.observe, Quiet: true}) // one key, on purpose
			if err != nil {
				b.Fatal(err)
			}
			h := nethttp.Wrap(mw)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r := httptest.NewRequestWithContext(tc.ctx, "GET", "/", nil)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				clear(w.Header())
				h.ServeHTTP(w, r)
			}
			if w.Code != http.StatusOK {
				b.Fatalf("status %d", w.Code)
			}
		})
	}
}
