package ginlimit_test

import (
	"fmt"
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

// TestKeys runs adaptertest's tests of KeyByClientIP and KeyByValue. (Gin
// finds no client in a zoned peer such as [fe80::1%eth0]:3, which
// net.ParseIP refuses; KeyByClientIP then answers ErrNoClientIP.)
func TestKeys(t *testing.T) {
	adaptertest.RunKeys(t, adaptertest.Keys{
		IPName: "ginlimit: KeyByClientIP",
		ByIP: func(opts *ratelimit.IPOptions) (func(*http.Request, []string) (string, error), error) {
			byIP, err := ginlimit.KeyByClientIP(opts)
			if err != nil {
				return nil, err
			}
			return func(r *http.Request, proxies []string) (string, error) {
				c, e := gin.CreateTestContext(httptest.NewRecorder())
				if err := e.SetTrustedProxies(proxies); err != nil {
					return "", err
				}
				c.Request = r
				return byIP(c)
			}, nil
		},
		ByValue: func(name string, v any) (string, error) {
			c, _ := gin.CreateTestContext(httptest.NewRecorder())
			if v != nil {
				c.Set(name, v)
			}
			return ginlimit.KeyByValue(name)(c)
		},
		Engine: func(t *testing.T, proxies []string, user, anon *ratelimit.Limiter) http.Handler {
			byUser, err := ginlimit.New(user, ginlimit.KeyByValue("user"), nil)
			require.NoError(t, err)
			byIP, err := ginlimit.KeyByClientIP(nil)
			require.NoError(t, err)
			byIPLimit, err := ginlimit.New(anon, byIP, nil)
			require.NoError(t, err)
			e := gin.New()
			require.NoError(t, e.SetTrustedProxies(proxies))
			auth := func(c *gin.Context) {
				if u := c.GetHeader("X-User"); u != "" {
					c.Set("user", u)
				}
			}
			ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
			e.GET("/user", auth, byUser, ok)
			e.GET("/anon", byIPLimit, ok)
			return e
		},
	})
}

// TestAbort checks that the handlers after a refusal never run, and that
// the ones before still see the answer.
func TestAbort(t *testing.T) {
	m, err := ratelimit.NewMiddleware(newLimiter(t, ratelimit.PerMinute(1)), func(*http.Request) (string, error) { return "k", nil }, nil)
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
	e.Use(ginlimit.LimitBy(ratelimit.PerMinute(1).WithBurst(3), ratelimit.KeyByAPIKey("X-API-Key")))
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
	quiet := &ratelimit.MiddlewareOptions{Quiet: []string{"one-key"}}
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

func (w *discard) Header() http.Header         { return w.h }
func (w *discard) WriteHeader(code int)        { w.code = code }
func (w *discard) Write(b []byte) (int, error) { return len(b), nil }

// Gin trusts every proxy until SetTrustedProxies says otherwise, so on
// gin.New() any client could pick its key with X-Forwarded-For: 200
// requests with 200 forged addresses, and a victim banned by a client that
// writes its address. KeyByClientIP keys the TCP peer there instead, and
// Gin's answer once the engine trusts only some proxies.
func TestKeyByClientIPDefaultEngine(t *testing.T) {
	byIP, err := ginlimit.KeyByClientIP(nil)
	require.NoError(t, err)
	serve := func(e *gin.Engine, remoteAddr string, header ...string) int {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remoteAddr
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		return w.Code
	}
	newEngine := func(configure func(*gin.Engine)) *gin.Engine {
		h, err := ginlimit.New(newLimiter(t, ratelimit.PerMinute(5)), byIP, nil)
		require.NoError(t, err)
		e := gin.New()
		configure(e)
		e.GET("/", h, func(c *gin.Context) { c.String(http.StatusOK, "ok") })
		return e
	}

	e := newEngine(func(*gin.Engine) {})
	admitted := 0
	for i := range 200 {
		if serve(e, "198.51.100.66:4000", "X-Forwarded-For", fmt.Sprintf("203.0.%d.%d", i/256, i%256+1)) == http.StatusOK {
			admitted++
		}
	}
	assert.Equal(t, 5, admitted, "gin.New(): 200 requests with 200 forged X-Forwarded-For addresses")
	for range 10 {
		serve(e, "198.51.100.66:4000", "X-Forwarded-For", "192.0.2.7", "X-Real-IP", "192.0.2.7")
	}
	assert.Equal(t, http.StatusOK, serve(e, "192.0.2.7:5000"), "gin.New(): the victim whose address was forged")

	// Custom RemoteIPHeaders on an engine that trusts every proxy.
	e = newEngine(func(e *gin.Engine) { e.RemoteIPHeaders = []string{"X-Client-IP"} })
	assert.Equal(t, []int{200, 200, 200, 200, 200, 429}, []int{
		serve(e, "198.51.100.66:1", "X-Client-IP", "203.0.113.1"), serve(e, "198.51.100.66:1", "X-Client-IP", "203.0.113.2"),
		serve(e, "198.51.100.66:1", "X-Client-IP", "203.0.113.3"), serve(e, "198.51.100.66:1", "X-Client-IP", "203.0.113.4"),
		serve(e, "198.51.100.66:1", "X-Client-IP", "203.0.113.5"), serve(e, "198.51.100.66:1", "X-Client-IP", "203.0.113.6"),
	}, "gin.New() with RemoteIPHeaders X-Client-IP")

	// An IPv6 peer of an engine that trusts every proxy.
	e = newEngine(func(*gin.Engine) {})
	codes := make([]int, 6)
	for i := range codes {
		codes[i] = serve(e, "[2001:db8::66]:1", "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i+1))
	}
	assert.Equal(t, []int{200, 200, 200, 200, 200, 429}, codes, "gin.New(), an IPv6 peer")

	// An IPv4-mapped peer of an engine that trusts every IPv4 proxy.
	e = newEngine(func(e *gin.Engine) { require.NoError(t, e.SetTrustedProxies([]string{"0.0.0.0/0"})) })
	for i := range codes {
		codes[i] = serve(e, "[::ffff:198.51.100.66]:1", "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i+1))
	}
	assert.Equal(t, []int{200, 200, 200, 200, 200, 429}, codes, "SetTrustedProxies 0.0.0.0/0, an IPv4-mapped peer")

	// With SetTrustedProxies, Gin's answer is believed from the proxies it
	// trusts, and only from them.
	e = newEngine(func(e *gin.Engine) { require.NoError(t, e.SetTrustedProxies([]string{"10.0.0.0/8"})) })
	for i := range 5 {
		assert.Equal(t, http.StatusOK, serve(e, "10.1.2.3:4000", "X-Forwarded-For", "203.0.113.7"), "request %d", i)
	}
	assert.Equal(t, http.StatusTooManyRequests, serve(e, "10.1.2.3:4000", "X-Forwarded-For", "203.0.113.7"))
	assert.Equal(t, http.StatusOK, serve(e, "10.1.2.3:4000", "X-Forwarded-For", "203.0.113.8"), "another client behind the proxy")
	for i := range 5 {
		assert.Equal(t, http.StatusOK, serve(e, "198.51.100.66:1", "X-Forwarded-For", fmt.Sprintf("192.0.2.%d", i+1)), "request %d", i)
	}
	assert.Equal(t, http.StatusTooManyRequests, serve(e, "198.51.100.66:1", "X-Forwarded-For", "192.0.2.9"), "an untrusted peer")

	// A trusted platform's header is the engine's explicit choice: believed,
	// also on an engine that otherwise trusts every proxy; X-Forwarded-For
	// is not, there.
	for _, trusted := range []bool{false, true} {
		e = newEngine(func(e *gin.Engine) {
			e.TrustedPlatform = gin.PlatformCloudflare
			if trusted {
				require.NoError(t, e.SetTrustedProxies(nil))
			}
		})
		for i := range 5 {
			assert.Equal(t, http.StatusOK, serve(e, "198.51.100.66:1", "CF-Connecting-IP", "203.0.113.7", "X-Forwarded-For", "203.0.113.7"), "SetTrustedProxies %v: request %d", trusted, i)
		}
		assert.Equal(t, http.StatusTooManyRequests, serve(e, "198.51.100.66:1", "CF-Connecting-IP", "203.0.113.7"), "SetTrustedProxies %v", trusted)
		assert.Equal(t, http.StatusOK, serve(e, "198.51.100.66:1", "CF-Connecting-IP", "203.0.113.8"), "SetTrustedProxies %v: another client", trusted)
		for i := range 5 {
			assert.Equal(t, http.StatusOK, serve(e, "198.51.100.67:1", "X-Forwarded-For", fmt.Sprintf("192.0.2.%d", i+1)), "SetTrustedProxies %v: request %d", trusted, i)
		}
		assert.Equal(t, http.StatusTooManyRequests, serve(e, "198.51.100.67:1", "X-Forwarded-For", "192.0.2.9"), "SetTrustedProxies %v: no platform header", trusted)
	}
}
