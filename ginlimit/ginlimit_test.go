package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/adaptertest"
	"github.com/tokenfair/ratelimit/ginlimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/storetest"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	// Limit's memorystore sweeps in a goroutine of its own until it learns
	// to sweep on the write path.
	goleak.VerifyTestMain(m)
}

// engine returns a Gin engine that runs handlers in front of next for every
// method and path.
func engine(next http.Handler, handlers ...gin.HandlerFunc) *gin.Engine {
	e := gin.New()
	e.Use(handlers...)
	e.Any("/*path", gin.WrapH(next))
	return e
}

func TestConformance(t *testing.T) {
	t.Run("Middleware", func(t *testing.T) {
		adaptertest.Run(t, func(t *testing.T, l *ratelimit.Limiter, key ratelimit.KeyFunc, opts *ratelimit.MiddlewareOptions, next http.Handler) http.Handler {
			m, err := ratelimit.NewMiddleware(l, key, opts)
			require.NoError(t, err)
			return engine(next, ginlimit.Wrap(m))
		})
	})
	t.Run("New", func(t *testing.T) {
		adaptertest.Run(t, func(t *testing.T, l *ratelimit.Limiter, key ratelimit.KeyFunc, opts *ratelimit.MiddlewareOptions, next http.Handler) http.Handler {
			h, err := ginlimit.New(l, func(c *gin.Context) (string, error) { return key(c.Request) }, opts)
			require.NoError(t, err)
			return engine(next, h)
		})
	})
}

func newLimiter(t testing.TB, l ratelimit.Limit) *ratelimit.Limiter {
	t.Helper()
	store, err := memorystore.New(nil)
	require.NoError(t, err)
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: l})
	require.NoError(t, err)
	return lim
}

func TestNewErrors(t *testing.T) {
	lim := newLimiter(t, ratelimit.PerSecond(1))
	_, err := ginlimit.New(lim, nil, nil)
	assert.Error(t, err)
	_, err = ginlimit.New(nil, ginlimit.KeyByValue("user"), nil)
	assert.Error(t, err)
	_, err = ginlimit.New(lim, ginlimit.KeyByValue("user"), &ratelimit.MiddlewareOptions{Headers: 99})
	assert.Error(t, err)
	_, err = ginlimit.KeyByClientIP(&ratelimit.IPOptions{TrustedProxies: []string{"10.0.0.0/8"}})
	assert.ErrorContains(t, err, "Engine.SetTrustedProxies", "TrustedProxies would be ignored")
}

// TestAbort checks that the handlers after a refusal never run, and that
// the ones before still see the answer.
func TestAbort(t *testing.T) {
	m, err := ratelimit.NewMiddleware(newLimiter(t, ratelimit.Per(1, time.Minute)), func(*http.Request) (string, error) { return "k", nil }, nil)
	require.NoError(t, err)
	var after, aborted []bool
	e := gin.New()
	e.Use(func(c *gin.Context) {
		c.Next()
		aborted = append(aborted, c.IsAborted())
	}, ginlimit.Wrap(m), func(c *gin.Context) { after = append(after, true) })
	e.GET("/", func(c *gin.Context) { c.Status(http.StatusNoContent) })
	for range 2 {
		e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	}
	assert.Equal(t, []bool{true}, after)
	assert.Equal(t, []bool{false, true}, aborted)
}

func TestLimit(t *testing.T) {
	e := gin.New()
	e.Use(ginlimit.LimitBy(ratelimit.Per(1, time.Minute).WithBurst(3), ratelimit.KeyByAPIKey("X-API-Key")))
	e.GET("/", func(c *gin.Context) { c.Status(http.StatusNoContent) })
	var codes []int
	for range 4 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-API-Key", "demo")
		e.ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	assert.Equal(t, []int{204, 204, 204, 429}, codes)

	err := panicError(func() { ginlimit.LimitBy(ratelimit.PerSecond(-5), ratelimit.KeyByAPIKey("X-API-Key")) })
	require.Error(t, err, "an invalid limit panics with an error")
	assert.True(t, strings.HasPrefix(err.Error(), "ginlimit.LimitBy: "), err)
	assert.Contains(t, err.Error(), "PerSecond(-5): the number of tokens must be positive")
	assert.EqualError(t, panicError(func() { ginlimit.LimitBy(ratelimit.PerSecond(5), nil) }), "ginlimit.LimitBy: nil key function")
	assert.EqualError(t, panicError(func() { ginlimit.Wrap(nil) }),
		"ginlimit.Wrap: nil *ratelimit.Middleware (check the error of ratelimit.NewMiddleware)")
}

// panicError returns the error that f panics with, nil if none.
func panicError(f func()) (err error) {
	defer func() { err, _ = recover().(error) }()
	f()
	return nil
}

// BenchmarkAllowed measures the adapter on an allowed request through the
// real engine, against the bare engine.
func BenchmarkAllowed(b *testing.B) {
	store, err := memorystore.New(&memorystore.Options{Clock: new(storetest.Clock).Now})
	require.NoError(b, err)
	// Time stands still and the bucket holds 10^15 tokens: every request is
	// allowed.
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.Per(1, time.Nanosecond).WithBurst(1e15)})
	require.NoError(b, err)
	quiet := &ratelimit.MiddlewareOptions{Quiet: true}
	m, err := ratelimit.NewMiddleware(lim, ratelimit.KeyByAPIKey("X-API-Key"), quiet)
	require.NoError(b, err)
	withGinKey, err := ginlimit.New(lim, ginlimit.KeyByValue("user"), quiet)
	require.NoError(b, err)
	setUser := func(c *gin.Context) { c.Set("user", "alice") }

	ok := func(c *gin.Context) { c.Status(http.StatusNoContent) }
	for _, bc := range []struct {
		name     string
		handlers []gin.HandlerFunc
	}{
		{"bare", []gin.HandlerFunc{ok}},
		{"Middleware", []gin.HandlerFunc{ginlimit.Wrap(m), ok}},
		{"bare+c.Set", []gin.HandlerFunc{setUser, ok}},
		{"New+KeyByValue", []gin.HandlerFunc{setUser, withGinKey, ok}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := gin.New()
			e.GET("/geocode", bc.handlers...)
			r := httptest.NewRequest(http.MethodGet, "/geocode?q=paris", nil)
			r.Header.Set("X-API-Key", "demo")
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				w.code = 0
				e.ServeHTTP(w, r)
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

func (w *discard) Header() http.Header { return w.h }

func (w *discard) WriteHeader(code int) { w.code = code }

func (w *discard) Write(b []byte) (int, error) { return len(b), nil }
