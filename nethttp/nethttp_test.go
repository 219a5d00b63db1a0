package nethttp

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/adaptertest"
	"github.com/tokenfair/ratelimit/memorystore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMiddlewareCallsNextOnlyWhenAdmitted(t *testing.T) {
	store, err := memorystore.New(memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerMinute(2)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, func(r *http.Request) (string, error) { return r.URL.Query().Get("u"), nil })
	require.NoError(t, err)
	calls := 0
	h := Middleware(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.WriteHeader(http.StatusAccepted)
	}))
	var codes []int
	for _, u := range []string{"a", "a", "a", "b", ""} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/?u="+u, nil))
		codes = append(codes, w.Code)
	}
	assert.Equal(t, []int{202, 202, 429, 202, 500}, codes)
	assert.Equal(t, 3, calls)
}

func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, l *ratelimit.Limiter, key ratelimit.KeyFunc, opts []ratelimit.Option, next http.Handler) http.Handler {
		m, err := ratelimit.NewMiddleware(l, key, opts...)
		require.NoError(t, err)
		return Middleware(m)(next)
	})
}

// BenchmarkAllowed measures the adapter on an allowed request against the
// bare handler, as the ginlimit and echolimit modules do for their engines.
func BenchmarkAllowed(b *testing.B) {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store, err := memorystore.New(memorystore.WithClock(func() time.Time { return clock }), memorystore.WithSweepInterval(0))
	require.NoError(b, err)
	defer store.Close()
	// Time stands still and the bucket holds 10^15 tokens: every request is
	// allowed.
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.Limit{Interval: 1, Burst: 1e15}})
	require.NoError(b, err)
	m, err := ratelimit.NewMiddleware(lim, ratelimit.KeyByAPIKey("X-API-Key"), ratelimit.WithoutWarnings())
	require.NoError(b, err)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{
		{"bare", ok},
		{"Middleware", Middleware(m)(ok)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/geocode?q=paris", nil)
			r.Header.Set("X-API-Key", "demo")
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				clear(w.h)
				w.code = 0
				bc.h.ServeHTTP(w, r)
			}
			if w.code != http.StatusNoContent {
				b.Fatalf("status %d, want 204", w.code)
			}
		})
	}
}

// discard is a ResponseWriter that keeps only the status.
type discard struct {
	h    http.Header
	code int
}

func (w *discard) Header() http.Header         { return w.h }
func (w *discard) WriteHeader(code int)        { w.code = code }
func (w *discard) Write(b []byte) (int, error) { return len(b), nil }

// TestCountIfKeepsFlusher: the status-recording writer still lets a
// streaming handler flush.
func TestCountIfKeepsFlusher(t *testing.T) {
	store, err := memorystore.New(memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerMinute(2)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, func(*http.Request) (string, error) { return "k", nil }, ratelimit.WithCountIf(ratelimit.Failed))
	require.NoError(t, err)
	h := Middleware(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := w.(http.Flusher)
		require.True(t, ok)
		w.Write([]byte("chunk"))
		f.Flush()
	}))
	for range 5 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		assert.Equal(t, 200, w.Code, "successful responses do not count")
		assert.True(t, w.Flushed)
	}
}
