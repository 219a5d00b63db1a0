// Package echolimit adapts a [ratelimit.Middleware] to Echo v4
// (github.com/labstack/echo/v4). It is plumbing only, so an Echo service
// answers exactly as a net/http one does. A refusal takes Echo's error
// path by default: the middleware returns an *echo.HTTPError, which the
// application's HTTPErrorHandler and logging see, and which Echo's
// DefaultHTTPErrorHandler writes byte for byte as the core would;
// [Options.WriteResponse] writes the answer directly instead.
//
// [LimitBy] is the common case in one line; [Wrap] takes a core middleware
// with any [ratelimit.KeyFunc]; [New] takes a [KeyFunc] of the
// echo.Context, such as [KeyByRealIP] or [KeyByValue].
package echolimit

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/quick"
)

// Options configures the Echo side of [Wrap] and [New]. A nil *Options is
// the zero value, every field's default.
type Options struct {
	// WriteResponse writes the answer to a request that may not proceed
	// directly, as the net/http adapter does, and returns nil, so Echo's
	// HTTPErrorHandler never sees it. Default: false, an *echo.HTTPError.
	WriteResponse bool
}

// LimitBy returns Echo middleware that limits requests to limit per key,
// on an in-process store, with the default options:
//
//	e.Use(echolimit.LimitBy(ratelimit.PerSecond(5).WithBurst(10), ratelimit.KeyByAPIKey("X-API-Key")))
//
// Like regexp.MustCompile, it is for values fixed in the source: it panics
// when limit is invalid or key is nil. Anything else takes [ratelimit.New],
// [ratelimit.NewMiddleware] and [Wrap].
func LimitBy(limit ratelimit.Limit, key ratelimit.KeyFunc) echo.MiddlewareFunc {
	return Wrap(quick.Middleware("echolimit.LimitBy", limit, key), nil)
}

// Wrap returns Echo middleware, configured by opts (nil for the defaults),
// that calls the next handler only when m admits the request and returns
// its error. Otherwise, with the rate-limit header fields set, it returns
// an *echo.HTTPError whose Code is the answer's status and whose Message
// the answer's JSON body, as a [json.Marshaler]; an answer Echo cannot
// reproduce (a custom body that is not compact JSON) is written directly,
// and the error still returned. Echo's Debug mode and ?pretty indent that
// JSON; use [Options.WriteResponse] when that matters.
//
// The status MiddlewareOptions.CountIf sees is c.Response().Status, after
// a handler's error is written with c.Error. Wrap allocates nothing of its
// own on an admitted request (but a small value when m counts responses),
// and panics when m is nil. docs/frameworks.md
// has the details.
func Wrap(m *ratelimit.Middleware, opts *Options) echo.MiddlewareFunc {
	return middleware(quick.Given("echolimit.Wrap", m), false, opts)
}

// KeyFunc is a [ratelimit.KeyFunc] of an Echo request's context: the key
// that identifies its client, or an error wrapping [ratelimit.ErrMissingKey].
type KeyFunc func(c echo.Context) (string, error)

// New returns Echo middleware that limits requests with l, keyed by key,
// configured by opts and eopts (nil for the defaults), as [Wrap] does; it
// returns [ratelimit.NewMiddleware]'s errors. Reaching the echo.Context
// costs two small allocations per request, which Wrap does not.
func New(l *ratelimit.Limiter, key KeyFunc, opts *ratelimit.MiddlewareOptions, eopts *Options) (echo.MiddlewareFunc, error) {
	if key == nil {
		return nil, errors.New("echolimit: New: nil key function")
	}
	m, err := ratelimit.NewMiddleware(l, func(r *http.Request) (string, error) {
		// The middleware below always puts the context there.
		return key(r.Context().Value(echoContextKey{}).(echo.Context))
	}, opts)
	if err != nil {
		return nil, err
	}
	return middleware(m, true, eopts), nil
}

// echoContextKey is the request context key of the echo.Context.
type echoContextKey struct{}

func middleware(m *ratelimit.Middleware, withContext bool, opts *Options) echo.MiddlewareFunc {
	direct, counts := opts != nil && opts.WriteResponse, m.CountsResponses()
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if withContext {
				r = r.WithContext(context.WithValue(r.Context(), echoContextKey{}, c))
			}
			var err error
			var panicked any
			status := func() (int, bool) {
				return max(c.Response().Status, http.StatusOK), c.Response().Committed // a 1xx is never final
			}
			run := func(served *http.Request) (code int, written int64) {
				if served != r { // with ResultInContext
					c.SetRequest(served)
				}
				var watch *hijackWatch
				if counts {
					watch = &hijackWatch{ResponseWriter: c.Response().Writer}
					c.Response().Writer = watch
					defer func() { c.Response().Writer = watch.ResponseWriter }()
				}
				code, panicked = quick.Run(func() {
					if err = next(c); err != nil && counts {
						// The status of an error is known once the error
						// handler has written it; it then leaves the
						// committed response alone when err comes back to it.
						c.Error(err)
					}
				}, status)
				if watch != nil && watch.hijacked {
					return code, -1
				}
				return code, c.Response().Size
			}
			// The core writes header fields to the response, and its
			// answer, if any, to w: nothing when next ran.
			w := captures.Get().(*capture)
			w.Response = c.Response()
			m.Handle(w, r, run)
			if panicked != nil {
				captures.Put(w)
				panic(panicked) // once the response has begun, it counts by its status
			}
			if w.status == 0 {
				captures.Put(w)
				return err
			}
			return answer(c, w.status, w.body, direct) // w and its body now belong to the answer
		}
	}
}

// answer writes the core's answer, or, on Echo's error path, turns it
// into an *echo.HTTPError that Echo's DefaultHTTPErrorHandler writes
// identically when it can: compact JSON followed by a newline with a
// Content-Type, or any answer to HEAD, which gets no body.
func answer(c echo.Context, status int, body []byte, direct bool) error {
	h, head := c.Response().Header(), c.Request().Method == http.MethodHead
	he := &echo.HTTPError{Code: status, Message: http.StatusText(status)}
	raw := bytes.TrimSuffix(body, []byte("\n"))
	out, err := json.Marshal(json.RawMessage(raw))
	isJSON := err == nil && len(raw) < len(body) && bytes.Equal(out, raw)
	if isJSON {
		he.Message = problem(raw)
	}
	switch {
	case direct || h.Get(echo.HeaderContentType) == "" || !isJSON && !head:
		c.Response().WriteHeader(status)
		c.Response().Write(body)
		if direct {
			return nil
		}
	case head && h.Get(echo.HeaderContentLength) == "":
		h.Set(echo.HeaderContentLength, strconv.Itoa(len(body))) // what net/http announces
	case !head:
		h.Del(echo.HeaderContentLength) // the error handler may write another body
	}
	return he
}

// problem is the JSON body of an answer, the Message of its HTTPError; it
// prints as the JSON text.
type problem string

// MarshalJSON returns the JSON body.
func (p problem) MarshalJSON() ([]byte, error) { return []byte(p), nil }

// capture is the ResponseWriter the core writes to: header fields go to
// the response, status and body are kept.
type capture struct {
	*echo.Response
	status int
	body   []byte
}

var captures = sync.Pool{New: func() any { return new(capture) }}

func (w *capture) WriteHeader(code int) { w.status = cmp.Or(w.status, code) }

func (w *capture) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.body = append(w.body, b...)
	return len(b), nil
}

// hijackWatch is the response's writer while a request whose response
// counts runs: it notes that the handler took the connection over, whose
// bytes the response does not see.
type hijackWatch struct {
	http.ResponseWriter
	hijacked bool
}

func (w *hijackWatch) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	w.hijacked = w.hijacked || err == nil
	return conn, rw, err
}

// Unwrap lets http.ResponseController reach the writer's other methods.
func (w *hijackWatch) Unwrap() http.ResponseWriter { return w.ResponseWriter }
