package metrics_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/metrics"
	"github.com/tokenfair/ratelimit/nethttp"
)

type nopObserver struct{}

func (nopObserver) Observe(*http.Request, ratelimit.Event) {}

// BenchmarkObserver compares an allowed request through the middleware with
// no observer, an observer that does nothing, and the Prometheus metrics.
func BenchmarkObserver(b *testing.B) {
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts *ratelimit.MiddlewareOptions
	}{
		{"none", &ratelimit.MiddlewareOptions{Quiet: true}}, // one key, on purpose
		{"nop", &ratelimit.MiddlewareOptions{Observe: nopObserver{}.Observe, Quiet: true}},
		{"prometheus", &ratelimit.MiddlewareOptions{Observe: m.Observe, Quiet: true}},
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
			mw, err := ratelimit.NewMiddleware(lim, func(*http.Request) (string, error) { return "k", nil }, tc.opts)
			if err != nil {
				b.Fatal(err)
			}
			h := nethttp.Wrap(mw)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r := httptest.NewRequest("GET", "/", nil)
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
