// Package nethttp adapts a [ratelimit.Middleware] to net/http: it has the
// func(http.Handler) http.Handler shape that routers such as chi and
// gorilla/mux accept, and wraps a plain http.ServeMux as well.
package nethttp

import (
	"bufio"
	"errors"
	"net"
	"net/http"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/quick"
)

// LimitBy returns middleware that limits requests to limit per key, on an
// in-process store, with the default options:
//
//	handler = nethttp.LimitBy(ratelimit.PerSecond(5).WithBurst(10), ratelimit.KeyByAPIKey("X-API-Key"))(handler)
//
// Like regexp.MustCompile, it is for values fixed in the source: it panics
// when limit is invalid or key is nil. Anything else takes [ratelimit.New],
// [ratelimit.NewMiddleware] and [Wrap].
func LimitBy(limit ratelimit.Limit, key ratelimit.KeyFunc) func(next http.Handler) http.Handler {
	return Wrap(quick.Middleware("nethttp.LimitBy", limit, key))
}

// Wrap returns middleware that lets a request reach next only when m
// admits it; otherwise m has answered it. It panics when m or next is nil.
func Wrap(m *ratelimit.Middleware) func(next http.Handler) http.Handler {
	m = quick.Given("nethttp.Wrap", m)
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic(errors.New("nethttp.Wrap: nil next handler"))
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var panicked any
			m.Handle(w, r, func(r *http.Request) (status int, written int64) {
				if !m.CountsResponses() {
					next.ServeHTTP(w, r)
					return 0, 0
				}
				sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
				status, panicked = quick.Run(func() { next.ServeHTTP(sw, r) }, sw.begun)
				if sw.hijacked {
					return status, -1
				}
				return status, sw.bytes
			})
			if panicked != nil {
				panic(panicked) // http.ErrAbortHandler, say, once the response has begun
			}
		})
	}
}

// statusWriter records the status of the response written through it, for
// MiddlewareOptions.CountIf: 200 until the handler says otherwise, as
// net/http sends it; an informational 1xx (103 Early Hints) is not the
// status. written tells a response that has begun, which counts even if
// its handler then panics.
type statusWriter struct {
	http.ResponseWriter
	status   int
	written  bool
	bytes    int64 // of the body, written
	hijacked bool  // the handler took the connection over
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.written && code >= 200 {
		s.status, s.written = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.written = true
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

// begun returns the status and whether the response has begun.
func (s *statusWriter) begun() (int, bool) { return s.status, s.written }

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush keeps streaming handlers (which assert http.Flusher) working.
func (s *statusWriter) Flush() { _ = s.FlushError() }

// FlushError is Flush with the underlying writer's error, for
// http.ResponseController, so that a handler learns that its client left.
func (s *statusWriter) FlushError() error {
	s.written = true
	return http.NewResponseController(s.ResponseWriter).Flush()
}

// Hijack keeps handlers that take over the connection (which assert
// http.Hijacker, as WebSocket upgraders do) working; it fails as the
// underlying writer does when that cannot hijack.
func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	s.written = true
	conn, rw, err := http.NewResponseController(s.ResponseWriter).Hijack()
	s.hijacked = s.hijacked || err == nil
	return conn, rw, err
}
