package echolimit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/adaptertest"
	"github.com/tokenfair/ratelimit/echolimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/storetest"
)

func TestMain(m *testing.M) {
	// Limit's memorystore sweeps in a goroutine of its own until it learns
	// to sweep on the write path.
	goleak.VerifyTestMain(m)
}

// newEcho returns an Echo instance that runs mw in front of next for every
// method and path.
func newEcho(next http.Handler, mw ...echo.MiddlewareFunc) *echo.Echo {
	e := echo.New()
	e.Use(mw...)
	e.Any("/*", echo.WrapHandler(next))
	return e
}

func TestConformance(t *testing.T) {
	middleware := func(eopts *echolimit.Options) adaptertest.NewHandler {
		return func(t *testing.T, l *ratelimit.Limiter, key ratelimit.KeyFunc, opts *ratelimit.MiddlewareOptions, next http.Handler) http.Handler {
			m, err := ratelimit.NewMiddleware(l, key, opts)
			require.NoError(t, err)
			return newEcho(next, echolimit.Wrap(m, eopts))
		}
	}
	withEchoKey := func(eopts *echolimit.Options) adaptertest.NewHandler {
		return func(t *testing.T, l *ratelimit.Limiter, key ratelimit.KeyFunc, opts *ratelimit.MiddlewareOptions, next http.Handler) http.Handler {
			mw, err := echolimit.New(l, func(c echo.Context) (string, error) { return key(c.Request()) }, opts, eopts)
			require.NoError(t, err)
			return newEcho(next, mw)
		}
	}
	direct := &echolimit.Options{WriteResponse: true}
	t.Run("Middleware", func(t *testing.T) { adaptertest.Run(t, middleware(nil)) })
	t.Run("Middleware/WriteResponse", func(t *testing.T) { adaptertest.Run(t, middleware(direct)) })
	t.Run("New", func(t *testing.T) { adaptertest.Run(t, withEchoKey(nil)) })
	t.Run("New/WriteResponse", func(t *testing.T) { adaptertest.Run(t, withEchoKey(direct)) })
	// The application's own HTTPErrorHandler, delegating to the default one
	// after it has looked at the error, changes nothing on the wire.
	t.Run("Middleware/HTTPErrorHandler", func(t *testing.T) {
		adaptertest.Run(t, func(t *testing.T, l *ratelimit.Limiter, key ratelimit.KeyFunc, opts *ratelimit.MiddlewareOptions, next http.Handler) http.Handler {
			m, err := ratelimit.NewMiddleware(l, key, opts)
			require.NoError(t, err)
			e := newEcho(next, echolimit.Wrap(m, nil))
			e.HTTPErrorHandler = func(err error, c echo.Context) {
				var he *echo.HTTPError
				if !errors.As(err, &he) {
					t.Errorf("error %v is not an *echo.HTTPError", err)
				}
				e.DefaultHTTPErrorHandler(err, c)
			}
			return e
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
	_, err := echolimit.New(lim, nil, nil, nil)
	assert.Error(t, err)
	_, err = echolimit.New(nil, echolimit.KeyByValue("user"), nil, nil)
	assert.Error(t, err)
	_, err = echolimit.New(lim, echolimit.KeyByValue("user"), &ratelimit.MiddlewareOptions{Headers: 99}, nil)
	assert.Error(t, err)
	_, err = echolimit.KeyByRealIP(&ratelimit.IPOptions{TrustedProxies: []string{"10.0.0.0/8"}})
	assert.ErrorContains(t, err, "IPExtractor", "TrustedProxies would be ignored")
}

// TestHTTPError checks what the application's HTTPErrorHandler receives.
func TestHTTPError(t *testing.T) {
	m, err := ratelimit.NewMiddleware(newLimiter(t, ratelimit.Per(1, time.Minute)), ratelimit.KeyByAPIKey("X-API-Key"), nil)
	require.NoError(t, err)
	var got []*echo.HTTPError
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		var he *echo.HTTPError
		require.True(t, errors.As(err, &he))
		got = append(got, he)
		c.String(he.Code, fmt.Sprintf("custom %d: %v", he.Code, he.Message))
	}
	e.Use(echolimit.Wrap(m, nil))
	e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })

	serve := func(apiKey string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if apiKey != "" {
			r.Header.Set("X-API-Key", apiKey)
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		return w
	}
	assert.Equal(t, http.StatusNoContent, serve("k").Code)
	w := serve("k")
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "60", w.Header().Get("Retry-After"))
	assert.Equal(t, []string{`"default";r=0;t=60`}, w.Header()["RateLimit"], "as the draft spells it")
	assert.Empty(t, w.Header().Get("Content-Length"), "the core's length is not the custom body's")
	assert.Contains(t, w.Body.String(), `custom 429: {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded"`)
	assert.Equal(t, http.StatusUnauthorized, serve("").Code)

	require.Len(t, got, 2)
	assert.Equal(t, http.StatusTooManyRequests, got[0].Code)
	b, err := json.Marshal(got[0].Message)
	require.NoError(t, err)
	var p map[string]any
	require.NoError(t, json.Unmarshal(b, &p))
	assert.EqualValues(t, 429, p["status"])
	assert.Equal(t, []any{"default"}, p["violated-policies"])
	assert.Equal(t, http.StatusUnauthorized, got[1].Code)
	assert.Contains(t, got[1].Error(), `"status":401`, "the error prints the JSON text")
}

// TestDebugIndents documents the one difference of Echo's error path: in
// Debug mode DefaultHTTPErrorHandler indents the JSON body. WriteResponse
// is unaffected.
func TestDebugIndents(t *testing.T) {
	lim := newLimiter(t, ratelimit.Per(1, time.Minute))
	m, err := ratelimit.NewMiddleware(lim, func(r *http.Request) (string, error) { return r.URL.Path, nil }, nil)
	require.NoError(t, err)
	ok := func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }
	for _, tc := range []struct {
		path     string
		opts     *echolimit.Options
		indented bool
	}{
		{"/error-path", nil, true},
		{"/direct", &echolimit.Options{WriteResponse: true}, false},
	} {
		e := echo.New()
		e.Debug = true
		e.GET(tc.path, ok, echolimit.Wrap(m, tc.opts))
		var w *httptest.ResponseRecorder
		for range 2 {
			w = httptest.NewRecorder()
			e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, tc.path, nil))
		}
		assert.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, tc.indented, json.Valid(w.Body.Bytes()) && w.Body.String()[1] == '\n', "%s: %q", tc.path, w.Body.String())
	}
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
	withEchoKey, err := echolimit.New(lim, echolimit.KeyByValue("user"), quiet, nil)
	require.NoError(b, err)
	setUser := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Set("user", "alice")
			return next(c)
		}
	}

	ok := func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }
	for _, bc := range []struct {
		name string
		mw   []echo.MiddlewareFunc
	}{
		{"bare", nil},
		{"Middleware", []echo.MiddlewareFunc{echolimit.Wrap(m, nil)}},
		{"Middleware+WriteResponse", []echo.MiddlewareFunc{echolimit.Wrap(m, &echolimit.Options{WriteResponse: true})}},
		{"bare+c.Set", []echo.MiddlewareFunc{setUser}},
		{"New+KeyByValue", []echo.MiddlewareFunc{setUser, withEchoKey}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := echo.New()
			e.GET("/geocode", ok, bc.mw...)
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

// TestCountIfWithHandlerErrors: a handler that returns an error has its
// status decided by the HTTPErrorHandler, which the middleware runs first,
// so WithCountIf counts it; the answer is written once.
func TestCountIfWithHandlerErrors(t *testing.T) {
	m, err := ratelimit.NewMiddleware(newLimiter(t, ratelimit.Per(2, time.Minute)),
		func(*http.Request) (string, error) { return "k", nil }, &ratelimit.MiddlewareOptions{CountIf: func(s int) bool { return s >= 400 }})
	require.NoError(t, err)
	handled := 0
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		handled++
		e.DefaultHTTPErrorHandler(err, c)
	}
	e.Use(echolimit.Wrap(m, nil))
	e.GET("/ok", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	e.GET("/fail", func(c echo.Context) error { return echo.NewHTTPError(http.StatusUnauthorized, "who are you?") })
	get := func(path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		return w
	}
	for range 5 {
		assert.Equal(t, http.StatusNoContent, get("/ok").Code, "successes never count")
	}
	w := get("/fail")
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Equal(t, `{"message":"who are you?"}`+"\n", w.Body.String(), "written once")
	assert.Equal(t, http.StatusUnauthorized, get("/fail").Code)
	assert.Equal(t, http.StatusTooManyRequests, get("/ok").Code, "two failures spent the budget")
	// As with Echo's RequestLogger and HandleError, the handled error still
	// goes up the chain, and DefaultHTTPErrorHandler leaves the committed
	// response alone: twice per failure, once for the refusal.
	assert.Equal(t, 5, handled)
}

func TestLimit(t *testing.T) {
	e := echo.New()
	e.Use(echolimit.LimitBy(ratelimit.Per(1, time.Minute).WithBurst(3), ratelimit.KeyByAPIKey("X-API-Key")))
	e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	var codes []int
	for range 4 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-API-Key", "demo")
		e.ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	assert.Equal(t, []int{204, 204, 204, 429}, codes)

	err := panicError(func() { echolimit.LimitBy(ratelimit.PerSecond(-5), ratelimit.KeyByAPIKey("X-API-Key")) })
	require.Error(t, err, "an invalid limit panics with an error")
	assert.True(t, strings.HasPrefix(err.Error(), "echolimit.LimitBy: "), err)
	assert.Contains(t, err.Error(), "PerSecond(-5): the number of tokens must be positive")
	assert.EqualError(t, panicError(func() { echolimit.LimitBy(ratelimit.PerSecond(5), nil) }), "echolimit.LimitBy: nil key function")
	assert.EqualError(t, panicError(func() { echolimit.Wrap(nil, nil) }),
		"echolimit.Wrap: nil *ratelimit.Middleware (check the error of ratelimit.NewMiddleware)")
}

// panicError returns the error that f panics with, nil if none.
func panicError(f func()) (err error) {
	defer func() { err, _ = recover().(error) }()
	f()
	return nil
}

// TestCountIfSeesTheFinalStatus: a handler that sends an interim 103
// before its answer: Echo commits the response at the 103, so the client
// gets 200, and CountIf sees that 200, never the 1xx. (A handler that only
// writes a body is a 200 too.)
func TestCountIfSeesTheFinalStatus(t *testing.T) {
	var seen []int
	m, err := ratelimit.NewMiddleware(newLimiter(t, ratelimit.Per(2, time.Minute)),
		func(*http.Request) (string, error) { return "k", nil },
		&ratelimit.MiddlewareOptions{CountIf: func(s int) bool { seen = append(seen, s); return s >= 400 }})
	require.NoError(t, err)
	e := echo.New()
	e.Use(echolimit.Wrap(m, nil))
	e.GET("/hints", echo.WrapHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte("who are you?"))
	})))
	e.GET("/body", func(c echo.Context) error {
		_, err := c.Response().Write([]byte("hello"))
		return err
	})
	srv := httptest.NewServer(e)
	defer srv.Close()
	var got []int
	for _, path := range []string{"/hints", "/body", "/hints"} {
		res, err := srv.Client().Get(srv.URL + path)
		require.NoError(t, err)
		res.Body.Close()
		got = append(got, res.StatusCode)
	}
	assert.Equal(t, got, seen, "CountIf saw the statuses the client got")
	assert.Equal(t, []int{200, 200, 200}, seen)
}
