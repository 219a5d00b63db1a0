package nethttp

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/adaptertest"
	"github.com/tokenfair/ratelimit/memorystore"
)

func TestMain(m *testing.M) {
	// Limit's memorystore sweeps in a goroutine of its own until it learns
	// to sweep on the write path.
	goleak.VerifyTestMain(m)
}

func newLimiter(t testing.TB, l ratelimit.Limit) *ratelimit.Limiter {
	t.Helper()
	store, err := memorystore.New(nil)
	require.NoError(t, err)
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: l})
	require.NoError(t, err)
	return lim
}

func TestMiddlewareCallsNextOnlyWhenAdmitted(t *testing.T) {
	m, err := ratelimit.NewMiddleware(newLimiter(t, ratelimit.Per(2, time.Minute)),
		func(r *http.Request) (string, error) { return r.URL.Query().Get("u"), nil }, nil)
	require.NoError(t, err)
	calls := 0
	h := Wrap(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.WriteHeader(http.StatusAccepted)
	}))
	var codes []int
	for _, u := range []string{"a", "a", "a", "b", ""} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/?u="+u, nil))
		codes = append(codes, w.Code)
	}
	assert.Equal(t, []int{202, 202, 429, 202, 401}, codes)
	assert.Equal(t, 3, calls)
}

func TestLimitBy(t *testing.T) {
	h := LimitBy(ratelimit.Per(1, time.Minute).WithBurst(3), ratelimit.KeyByAPIKey("X-API-Key"))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	var codes []int
	for range 4 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", "demo")
		h.ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	assert.Equal(t, []int{204, 204, 204, 429}, codes)

	err := panicError(func() { LimitBy(ratelimit.PerSecond(-5), ratelimit.KeyByAPIKey("X-API-Key")) })
	require.Error(t, err, "an invalid limit panics with an error")
	assert.True(t, strings.HasPrefix(err.Error(), "nethttp.LimitBy: "), err)
	assert.Contains(t, err.Error(), "PerSecond(-5): the number of tokens must be positive")
	assert.EqualError(t, panicError(func() { LimitBy(ratelimit.PerSecond(5), nil) }), "nethttp.LimitBy: nil key function")
	assert.EqualError(t, panicError(func() { Wrap(nil) }),
		"nethttp.Wrap: nil *ratelimit.Middleware (check the error of ratelimit.NewMiddleware)")
	assert.EqualError(t, panicError(func() { LimitBy(ratelimit.PerSecond(5), ratelimit.KeyByAPIKey("X-API-Key"))(nil) }),
		"nethttp.Wrap: nil next handler")
}

// panicError returns the error that f panics with, nil if none.
func panicError(f func()) (err error) {
	defer func() { err, _ = recover().(error) }()
	f()
	return nil
}

func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T, l *ratelimit.Limiter, key ratelimit.KeyFunc, opts *ratelimit.MiddlewareOptions, next http.Handler) http.Handler {
		m, err := ratelimit.NewMiddleware(l, key, opts)
		require.NoError(t, err)
		return Wrap(m)(next)
	})
}

// BenchmarkAllowed measures the adapter on an allowed request against the
// bare handler, as the ginlimit and echolimit modules do for their engines.
func BenchmarkAllowed(b *testing.B) {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store, err := memorystore.New(&memorystore.Options{Clock: func() time.Time { return clock }})
	require.NoError(b, err)
	// Time stands still and the bucket holds 10^15 tokens: every request is
	// allowed.
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.Per(1, time.Nanosecond).WithBurst(1e15)})
	require.NoError(b, err)
	m, err := ratelimit.NewMiddleware(lim, ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{Quiet: true})
	require.NoError(b, err)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{
		{"bare", ok},
		{"Middleware", Wrap(m)(ok)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/geocode?q=paris", nil)
			r.Header.Set("X-API-Key", "demo")
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
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
	m, err := ratelimit.NewMiddleware(newLimiter(t, ratelimit.Per(2, time.Minute)),
		func(*http.Request) (string, error) { return "k", nil },
		&ratelimit.MiddlewareOptions{CountIf: func(s int) bool { return s >= 400 }})
	require.NoError(t, err)
	h := Wrap(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := w.(http.Flusher)
		if !ok {
			t.Error("the writer is not an http.Flusher")
			return
		}
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

// TestCountIfKeepsHijacker: the status-recording writer still lets a
// handler take over the connection, as WebSocket upgraders do, on a real
// server; on a writer that cannot, Hijack fails instead.
func TestCountIfKeepsHijacker(t *testing.T) {
	m, err := ratelimit.NewMiddleware(newLimiter(t, ratelimit.Per(5, time.Minute)),
		func(*http.Request) (string, error) { return "k", nil },
		&ratelimit.MiddlewareOptions{CountIf: func(s int) bool { return s >= 400 }})
	require.NoError(t, err)
	hijackErr := make(chan error, 1)
	h := Wrap(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			hijackErr <- errors.New("the writer is not an http.Hijacker")
			return
		}
		conn, rw, err := hj.Hijack()
		hijackErr <- err
		if err != nil {
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		rw.Flush()
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	res, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.NoError(t, <-hijackErr)
	assert.Equal(t, "hijacked", string(body))

	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	assert.ErrorIs(t, <-hijackErr, http.ErrNotSupported, "a recorder cannot be hijacked")
}

// flushFailer is a ResponseWriter whose client has left: flushing fails.
type flushFailer struct{ *httptest.ResponseRecorder }

func (flushFailer) FlushError() error { return errors.New("client gone") }

// A streaming handler behind a Middleware that counts responses learns,
// through http.ResponseController, that its client has left.
func TestFlushErrorReachesTheHandler(t *testing.T) {
	m, err := ratelimit.NewMiddleware(newLimiter(t, ratelimit.Per(2, time.Minute)),
		func(*http.Request) (string, error) { return "k", nil }, &ratelimit.MiddlewareOptions{CountIf: func(int) bool { return true }})
	require.NoError(t, err)
	var flushed error
	h := Wrap(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("a word"))
		flushed = http.NewResponseController(w).Flush()
	}))
	h.ServeHTTP(flushFailer{httptest.NewRecorder()}, httptest.NewRequest(http.MethodGet, "/", nil))
	assert.EqualError(t, flushed, "client gone")
}
