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
// [Wrap] for the details). [Options.WriteResponse] writes the answer
// directly instead.
//
// [LimitBy] is the common case in one line. [Wrap] takes a core
// middleware built with any [ratelimit.KeyFunc]; [New] takes a [KeyFunc]
// that reads the echo.Context, such as [KeyByRealIP], which follows the
// Echo instance's IPExtractor, or [KeyByValue], which reads a value that an
// earlier middleware stored with c.Set, such as an authenticated user's ID.
package echolimit

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/quick"
)

// Options configures the Echo side of [Wrap] and [New]. A nil
// *Options is the zero value: every field's default.
type Options struct {
	// WriteResponse makes the middleware write the answer to a request
	// that may not proceed (429, or the error handler's answer) directly
	// to the response, as the net/http adapter does, and return nil:
	// Echo's HTTPErrorHandler never sees it. Default: the middleware
	// returns an *echo.HTTPError, described at [Middleware].
	WriteResponse bool
}

// LimitBy returns Echo middleware that limits requests to limit per key, on
// an in-process store with its defaults, the default [ratelimit.MiddlewareOptions]
// and the default [Options]:
//
//	e.Use(echolimit.LimitBy(ratelimit.PerSecond(5).WithBurst(10), ratelimit.KeyByAPIKey("X-API-Key")))
//
// Like regexp.MustCompile, it is meant for values fixed in the source: it
// panics, with an error that says what is wrong, when limit is invalid or
// key is nil. For anything else (a shared store, several policies,
// options, or an error instead of a panic) build the middleware
// explicitly: a store such as memorystore.New, then [ratelimit.New],
// [ratelimit.NewMiddleware], and [Wrap].
func LimitBy(limit ratelimit.Limit, key ratelimit.KeyFunc) echo.MiddlewareFunc {
	return Wrap(quick.Middleware("echolimit.LimitBy", limit, key), nil)
}

// Wrap returns Echo middleware, configured by opts (nil for the
// defaults), that calls the next handler only when m admits the request,
// and returns its error. The status that m needs for Options.CountIf is
// c.Response().Status after the next handler (200 if that is an interim
// 1xx, as the client then gets: Echo commits the response at the first
// status it is given, 1xx included); when it returns an error,
// the middleware first has Echo's HTTPErrorHandler write it (c.Error) and
// then returns it, as Echo's RequestLogger does with HandleError;
// DefaultHTTPErrorHandler leaves the committed response alone. An
// in-flight slot of Options.MaxInFlight is held while the next handler
// runs. It costs no allocation of its own on an admitted request.
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
// which indent the JSON. Use [Options.WriteResponse] when that matters.
//
// It panics, with an error that says so, when m is nil.
func Wrap(m *ratelimit.Middleware, opts *Options) echo.MiddlewareFunc {
	return middleware(quick.Given("echolimit.Wrap", m), false, opts)
}

// KeyFunc returns the key that identifies the client of an Echo request,
// like a [ratelimit.KeyFunc]: ErrMissingKey when the request carries no
// identity, and never an empty key with a nil error.
type KeyFunc func(c echo.Context) (string, error)

// New returns Echo middleware that limits requests with l, keyed by key,
// configured by the core's opts and by eopts (either nil for the
// defaults), and otherwise behaves as [Wrap]. It returns the errors
// of [ratelimit.NewMiddleware].
//
// So that key can reach the echo.Context, the middleware hands the core a
// shallow copy of the request whose context carries it; that costs two
// small allocations per request, which [Wrap] with a
// [ratelimit.KeyFunc] does not. The handlers after it see the original
// request.
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
			run := func(served *http.Request) (code int) {
				if served != r { // with ResultInContext
					c.SetRequest(served)
				}
				code, panicked = quick.Run(func() {
					if err = next(c); err != nil && counts {
						// The status of an error is known once the error
						// handler has written it; it then leaves the
						// committed response alone when err comes back to it.
						c.Error(err)
					}
				}, status)
				return code
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
