// Package ginlimit adapts a [ratelimit.Middleware] to Gin
// (github.com/gin-gonic/gin). It is plumbing only: the core middleware finds
// the key, decides, writes the rate-limit header fields and, when a request
// may not proceed, the whole answer, so a Gin service answers exactly as a
// net/http one does. On a refusal or an error the handler aborts the chain,
// and the handlers after it never run.
//
// [LimitBy] is the common case in one line. [Wrap] takes a core
// middleware built with any [ratelimit.KeyFunc]; [New] takes a [KeyFunc]
// that reads the *gin.Context, such as [KeyByClientIP], which follows Gin's
// trusted-proxy settings, or [KeyByValue], which reads a value that an
// earlier handler stored with c.Set, such as an authenticated user's ID.
package ginlimit

import (
	"context"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/quick"
)

// LimitBy returns a Gin handler that limits requests to limit per key, on
// an in-process store with its defaults and the default
// [ratelimit.MiddlewareOptions]:
//
//	r.Use(ginlimit.LimitBy(ratelimit.PerSecond(5).WithBurst(10), ratelimit.KeyByAPIKey("X-API-Key")))
//
// Like regexp.MustCompile, it is meant for values fixed in the source: it
// panics, with an error that says what is wrong, when limit is invalid or
// key is nil. For anything else (a shared store, several policies,
// options, or an error instead of a panic) build the middleware
// explicitly: a store such as memorystore.New, then [ratelimit.New],
// [ratelimit.NewMiddleware], and [Wrap].
func LimitBy(limit ratelimit.Limit, key ratelimit.KeyFunc) gin.HandlerFunc {
	return Wrap(quick.Middleware("ginlimit.LimitBy", limit, key))
}

// Wrap returns a Gin handler that runs the rest of the chain (c.Next)
// only when m admits the request; otherwise m has already answered it (429,
// or its error handler's answer) and the handler calls c.Abort. The status
// that m needs for Options.CountIf is c.Writer.Status() after the chain,
// and an in-flight slot of Options.MaxInFlight is held while it runs. It
// costs no allocation of its own. It panics, with an error that says so,
// when m is nil.
func Wrap(m *ratelimit.Middleware) gin.HandlerFunc {
	m = quick.Given("ginlimit.Wrap", m)
	return func(c *gin.Context) { handle(m, c, c.Request) }
}

// handle runs the rest of c's chain inside m.Handle and aborts the chain
// when m answered instead.
func handle(m *ratelimit.Middleware, c *gin.Context, r *http.Request) {
	admitted := false
	var panicked any
	m.Handle(c.Writer, r, func(next *http.Request) (status int) {
		admitted = true
		if next != r { // with ResultInContext
			c.Request = next
		}
		status, panicked = quick.Run(c.Next, func() (int, bool) { return c.Writer.Status(), c.Writer.Written() })
		return status
	})
	if !admitted {
		c.Abort()
	}
	if panicked != nil {
		panic(panicked) // once the response has begun, it counts by its status
	}
}

// KeyFunc returns the key that identifies the client of a Gin request, like
// a [ratelimit.KeyFunc]: ErrMissingKey when the request carries no
// identity, and never an empty key with a nil error.
type KeyFunc func(c *gin.Context) (string, error)

// New returns a Gin handler that limits requests with l, keyed by key and
// configured by opts (nil for the defaults), and otherwise behaves as
// [Wrap]. It returns the errors of [ratelimit.NewMiddleware].
//
// So that key can reach the *gin.Context, the handler hands the core a
// shallow copy of the request whose context carries it; that costs two
// small allocations per request, which [Wrap] with a
// [ratelimit.KeyFunc] does not. The handlers after it see the original
// request.
func New(l *ratelimit.Limiter, key KeyFunc, opts *ratelimit.MiddlewareOptions) (gin.HandlerFunc, error) {
	if key == nil {
		return nil, errors.New("ginlimit: New: nil key function")
	}
	m, err := ratelimit.NewMiddleware(l, func(r *http.Request) (string, error) {
		// The handler below always puts the context there.
		return key(r.Context().Value(ginContextKey{}).(*gin.Context))
	}, opts)
	if err != nil {
		return nil, err
	}
	return func(c *gin.Context) {
		r := c.Request
		handle(m, c, r.WithContext(context.WithValue(r.Context(), ginContextKey{}, c)))
	}, nil
}

// ginContextKey is the request context key of the *gin.Context.
type ginContextKey struct{}
