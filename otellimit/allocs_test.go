package otellimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
)

// roomy is a limiter that allows every request of a benchmark or an
// allocation count: two policies, one of them near its limit never.
func roomy(t testing.TB) *ratelimit.Limiter {
	t.Helper()
	store, err := memorystore.New(nil)
	require.NoError(t, err)
	lim, err := ratelimit.New(store,
		ratelimit.Policy{Name: "per-key", Limit: ratelimit.PerSecond(1_000_000).WithBurst(1_000_000_000)},
		ratelimit.Policy{Name: "global", Limit: ratelimit.PerSecond(1_000_000).WithBurst(1_000_000_000), Global: true})
	require.NoError(t, err)
	return lim
}

// handlerOf returns lim behind nethttp with observe (nil: none).
func handlerOf(t testing.TB, lim *ratelimit.Limiter, observe func(*http.Request, ratelimit.Event)) http.Handler {
	t.Helper()
	mw, err := ratelimit.NewMiddleware(lim, func(*http.Request) (string, error) { return "k", nil },
		&ratelimit.MiddlewareOptions{Observe: observe, Quiet: true})
	require.NoError(t, err)
	return nethttp.Wrap(mw)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
}

// TestAllowedPathAllocatesNothing: with the SDK's meter provider, counting
// an allowed decision allocates nothing, whether the request has no span
// or one that is not recording, and an allowed request through the
// middleware allocates no more with the metrics than without.
func TestAllowedPathAllocatesNothing(t *testing.T) {
	s := newSDK(t)
	lim := roomy(t)
	res, err := lim.Take(context.Background(), "k", 1)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	ev := ratelimit.Event{Limiter: lim, KeyHash: 1, Result: res, Elapsed: 1000}

	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	sampledOut, span := tp.Tracer("test").Start(context.Background(), "GET /")
	defer span.End()
	require.False(t, span.IsRecording())
	for name, ctx := range map[string]context.Context{"no span": context.Background(), "span not recording": sampledOut} {
		r := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
		s.m.Observe(r, ev) // the first sight of the limiter makes its attribute sets
		assert.Zero(t, testing.AllocsPerRun(1000, func() { s.m.Observe(r, ev) }), "Observe, %s", name)
	}

	r := httptest.NewRequest("GET", "/", nil)
	w := httptest.NewRecorder()
	serve := func(h http.Handler) func() {
		return func() {
			clear(w.Header())
			h.ServeHTTP(w, r)
		}
	}
	bare, observed := serve(handlerOf(t, lim, nil)), serve(handlerOf(t, lim, s.m.Observe))
	observed()
	without := testing.AllocsPerRun(1000, bare)
	with := testing.AllocsPerRun(1000, observed)
	assert.Equal(t, without, with, "allocations of an allowed request through the middleware, without and with the metrics")
	t.Logf("an allowed request through nethttp and the middleware: %v allocations without the metrics, %v with", without, with)
	assert.Equal(t, http.StatusOK, w.Code)
}
