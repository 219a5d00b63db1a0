package metrics_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/metrics"
	"github.com/tokenfair/ratelimit/nethttp"
)

// Count decisions by policy and outcome and serve them at /metrics, outside
// the limiter.
func Example() {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		panic(err)
	}
	store, _ := memorystore.New(nil)
	_ = m.TrackKeys("memory", store.Len)
	limiter, _ := ratelimit.New(store, ratelimit.Policy{Name: "api", Limit: ratelimit.Per(2, time.Minute)})
	mw, _ := ratelimit.NewMiddleware(limiter, ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{
		Observe: m.Observe,
		Logger:  m.Logger(nil), // count the misconfiguration warnings; log them as slog.Default does
	})

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", nethttp.Wrap(mw)(http.NotFoundHandler()))

	for range 3 {
		r := httptest.NewRequest("GET", "/geocode", nil)
		r.Header.Set("X-API-Key", "k")
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(w.Body.String(), "\n") {
		if strings.HasPrefix(line, "ratelimit_decisions_total{") || strings.HasPrefix(line, "ratelimit_keys{") {
			fmt.Println(line)
		}
	}
	// Output:
	// ratelimit_decisions_total{outcome="allowed",policy="api"} 2
	// ratelimit_decisions_total{outcome="limited",policy="api"} 1
	// ratelimit_keys{store="memory"} 1
}

// Count the decisions that leave a client fewer than half its burst: with a
// burst of 4, those that leave 1 or 0 tokens.
func ExampleMetrics_SetNearLimit() {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		panic(err)
	}
	if err := m.SetNearLimit(0.5); err != nil {
		panic(err)
	}
	store, _ := memorystore.New(nil)
	limiter, _ := ratelimit.New(store, ratelimit.Policy{Name: "api", Limit: ratelimit.Per(4, time.Minute)})
	mw, _ := ratelimit.NewMiddleware(limiter, ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{Observe: m.Observe})
	h := nethttp.Wrap(mw)(http.NotFoundHandler())

	for range 5 { // 3, 2, 1 and 0 tokens left, then a refusal
		r := httptest.NewRequest("GET", "/geocode", nil)
		r.Header.Set("X-API-Key", "k")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	w := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(w.Body.String(), "\n") {
		if strings.HasPrefix(line, "ratelimit_near_limit_total{") {
			fmt.Println(line)
		}
	}
	fmt.Println(m.SetNearLimit(1.5))
	// Output:
	// ratelimit_near_limit_total{policy="api"} 2
	// metrics: SetNearLimit(1.5): the fraction of the burst must be in (0, 1]
}
