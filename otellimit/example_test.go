package otellimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
	"github.com/tokenfair/ratelimit/otellimit"
)

// Count decisions by policy and result in OpenTelemetry instruments. Here a
// ManualReader reads them; a service gives New its meter provider (nil for
// the global one), whose PeriodicReader pushes them, as the demo's -otlp
// does with the OTLP/HTTP exporter.
func Example() {
	reader := sdkmetric.NewManualReader()
	m, err := otellimit.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		panic(err)
	}
	store, _ := memorystore.New(nil)
	limiter, _ := ratelimit.New(store, ratelimit.Policy{Name: "api", Limit: ratelimit.Per(2, time.Minute)})
	mw, _ := ratelimit.NewMiddleware(limiter, ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{
		Observe: m.Observe, // with Prometheus too: a function that calls both
	})
	h := nethttp.Wrap(mw)(http.NotFoundHandler())

	for range 3 {
		r := httptest.NewRequest("GET", "/geocode", nil)
		r.Header.Set("X-API-Key", "k")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, inst := range sm.Metrics {
			if sum, ok := inst.Data.(metricdata.Sum[int64]); ok && inst.Name == "rate_limiting.requests" {
				for _, dp := range sum.DataPoints {
					policy, _ := dp.Attributes.Value("rate_limiting.policy")
					result, _ := dp.Attributes.Value("rate_limiting.result")
					lines = append(lines, fmt.Sprintf("%s{policy=%s, result=%s} %d", inst.Name, policy.Emit(), result.Emit(), dp.Value))
				}
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// rate_limiting.requests{policy=api, result=allowed} 2
	// rate_limiting.requests{policy=api, result=limited} 1
}
