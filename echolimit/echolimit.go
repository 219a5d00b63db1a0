// Package echolimit adapts a [ratelimit.Middleware] to Echo v4
// (github.com/labstack/echo/v4). It is plumbing only: the core middleware
// finds the key, decides, writes the rate-limit header fields and composes
// the answer to a request that may not proceed, so an Echo service answers
// exactly as a net/http one does.
//
// By default that answer goes through Echo's error path: the middleware
// returns an *echo.HTTPError, so the application's HTTPErrorHandler and its
// logging middleware see every refusal. With Echo's DefaultHTTPErrorHandler
// the bytes on the wire are those that the core writes on net/http (see
// [Middleware] for the details). [WriteResponse] writes the answer directly
// instead.
//
// Use [Middleware] with any [ratelimit.KeyFunc], or [New] with a [KeyFunc]
// that reads the echo.Context, such as [KeyByRealIP], which follows the
// Echo instance's IPExtractor, or [KeyByValue], which reads a value that an
// earlier middleware stored with c.Set, such as an authenticated user's ID.
package echolimit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/tokenfair/ratelimit"
)

// Option configures [Middleware].
type Option func(*config)

type config struct {
	direct bool
}

// WriteResponse makes the middleware write the answer to a request that may
// not proceed (429, or the error handler's answer) directly to the response,
// as the net/http adapter does, and return nil: Echo's HTTPErrorHandler
// never sees it. The default returns an *echo.HTTPError instead.
func WriteResponse() Option {
	return func(c *config) { c.direct = true }
}

// Middleware returns Echo middleware that calls the next handler only when
// m admits the request, and returns its error. The status that m needs for
// [ratelimit.WithCountIf] is c.Response().Status after the next handler;
// when it returns an error, the middleware first has Echo's HTTPErrorHandler
// write it (c.Error) and then returns it, as Echo's RequestLogger does with
// HandleError; DefaultHTTPErrorHandler leaves the committed response alone. An in-flight slot of
// [ratelimit.WithMaxInFlight] is held while the next handler runs. It costs
// no allocation of its own on an admitted request.
//
// When m refuses a request, or cannot decide it, the rate-limit header
// fields, Retry-After, Content-Type and Cache-Control are already set on
// c.Response().Header(), and the middleware returns an *echo.HTTPError
// whose Code is the answer's status and whose Message is the answer's JSON
// body as a [json.Marshaler] (it prints as the JSON text), so that Echo's
// DefaultHTTPErrorHandler writes the very bytes that the core writes on
// net/http: the same status, header fields and body. Content-Length is
// removed from the header, since another error handler may write another
// body (net/http computes it again for a short body); for HEAD, which gets
// no body, it is kept, or set to the length net/http would announce. An
// answer that Echo's JSON encoding cannot reproduce (a custom deny or error
// handler that writes a body other than compact JSON followed by a newline,
// or no Content-Type) is written directly, and the HTTPError is still
// returned for logging; DefaultHTTPErrorHandler leaves a committed response
// alone.
//
// Two settings of Echo change the body that DefaultHTTPErrorHandler writes
// for that HTTPError: Debug mode, and a "pretty" query parameter, both of
// which indent the JSON. Use [WriteResponse] when that matters.
func Middleware(m *ratelimit.Middleware, opts ...Option) echo.MiddlewareFunc {
	return middleware(m, false, opts)
}

// KeyFunc returns the key that identifies the client of an Echo request,
// like a [ratelimit.KeyFunc]: ErrMissingKey when the request carries no
// identity, and never an empty key with a nil error.
type KeyFunc func(c echo.Context) (string, error)

// New returns Echo middleware that limits requests with l, keyed by key and
// configured by the core's options, and otherwise behaves as [Middleware]
// with its default, Echo's error path. It returns the errors of
// [ratelimit.NewMiddleware].
//
// So that key can reach the echo.Context, the middleware hands the core a
// shallow copy of the request whose context carries it; that costs two
// small allocations per request, which [Middleware] with a
// [ratelimit.KeyFunc] does not. The handlers after it see the original
// request.
func New(l *ratelimit.Limiter, key KeyFunc, opts ...ratelimit.Option) (echo.MiddlewareFunc, error) {
	if key == nil {
		return nil, errors.New("echolimit: New: nil key function")
	}
	m, err := ratelimit.NewMiddleware(l, func(r *http.Request) (string, error) {
		c, ok := r.Context().Value(echoContextKey{}).(echo.Context)
		if !ok {
			return "", errNoContext
		}
		return key(c)
	}, opts...)
	if err != nil {
		return nil, err
	}
	return middleware(m, true, nil), nil
}

// echoContextKey is the request context key of the echo.Context.
type echoContextKey struct{}

var errNoContext = errors.New("echolimit: no echo.Context in the request's context")

func middleware(m *ratelimit.Middleware, withContext bool, opts []Option) echo.MiddlewareFunc {
	var cfg config
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	counts := m.CountsResponses()
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if withContext {
				r = r.WithContext(context.WithValue(r.Context(), echoContextKey{}, c))
			}
			var err error
			admitted := false
			run := func() int {
				admitted = true
				if err = next(c); err != nil && counts {
					// The status of an error is known once the error
					// handler has written it; it then leaves the
					// committed response alone when err comes back to it.
					c.Error(err)
				}
				return c.Response().Status
			}
			if cfg.direct {
				m.Handle(c.Response(), r, run)
				return err
			}
			w := captures.Get().(*capture)
			w.h = c.Response().Header()
			m.Handle(w, r, run)
			status, body := w.status, w.body
			w.h, w.status, w.body = nil, 0, w.body[:0]
			if admitted {
				captures.Put(w)
				return err
			}
			w.body = nil // body now belongs to the answer
			captures.Put(w)
			return answer(c, status, body)
		}
	}
}

// answer turns what the core wrote into an *echo.HTTPError, or writes it
// when Echo could not reproduce it.
func answer(c echo.Context, status int, body []byte) error {
	if status == 0 {
		return nil // the deny or error handler wrote nothing
	}
	h := c.Response().Header()
	raw, ok := reproducible(h, body)
	head := c.Request().Method == http.MethodHead
	if ok || head && h.Get(echo.HeaderContentType) != "" {
		var msg any = http.StatusText(status)
		if ok {
			msg = problem(raw)
		}
		if head {
			// No body is sent, but net/http would announce its length.
			if h.Get(echo.HeaderContentLength) == "" {
				h.Set(echo.HeaderContentLength, strconv.Itoa(len(body)))
			}
		} else {
			h.Del(echo.HeaderContentLength)
		}
		return &echo.HTTPError{Code: status, Message: msg}
	}
	resp := c.Response()
	resp.WriteHeader(status)
	resp.Write(body)
	return &echo.HTTPError{Code: status, Message: http.StatusText(status)}
}

// reproducible reports whether Echo's default JSON encoding of the message
// raw writes body: body is compact JSON that encoding/json leaves as is,
// followed by a newline, and a Content-Type is set.
func reproducible(h http.Header, body []byte) (json.RawMessage, bool) {
	if len(body) < 2 || body[len(body)-1] != '\n' || h.Get(echo.HeaderContentType) == "" {
		return nil, false
	}
	raw := json.RawMessage(body[:len(body)-1])
	out, err := json.Marshal(raw)
	return raw, err == nil && bytes.Equal(out, raw)
}

// problem is the JSON body of an answer, the Message of its HTTPError.
type problem json.RawMessage

// MarshalJSON returns the JSON body.
func (p problem) MarshalJSON() ([]byte, error) { return p, nil }

// String returns the JSON body, for logs.
func (p problem) String() string { return string(p) }

// capture is the ResponseWriter the core writes to on Echo's error path:
// header fields go to the real response, status and body are kept.
type capture struct {
	h      http.Header
	status int
	body   []byte
}

var captures = sync.Pool{New: func() any { return new(capture) }}

func (w *capture) Header() http.Header { return w.h }

func (w *capture) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *capture) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, b...)
	return len(b), nil
}
