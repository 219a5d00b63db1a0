// Package ginlimit adapts a [ratelimit.Middleware] to Gin
// (github.com/gin-gonic/gin). It is plumbing only, so a Gin service answers
// exactly as a net/http one does; on a refusal or an error the handler
// aborts the chain. [LimitBy] is the common case in one line; [Wrap] takes
// a core middleware with any [ratelimit.KeyFunc]; [New] takes a [KeyFunc]
// of the *gin.Context, such as [KeyByClientIP] or [KeyByValue].
package ginlimit

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/quick"
)

// LimitBy returns a Gin handler that limits requests to limit per key, on
// an in-process store, with the default options:
//
//	r.Use(ginlimit.LimitBy(ratelimit.PerSecond(5).WithBurst(10), ratelimit.KeyByAPIKey("X-API-Key")))
//
// Like regexp.MustCompile, it is for values fixed in the source: it panics
// when limit is invalid or key is nil. Anything else takes [ratelimit.New],
// [ratelimit.NewMiddleware] and [Wrap].
func LimitBy(limit ratelimit.Limit, key ratelimit.KeyFunc) gin.HandlerFunc {
	return Wrap(quick.Middleware("ginlimit.LimitBy", limit, key))
}

// Wrap returns a Gin handler that runs the rest of the chain (c.Next) only
// when m admits the request, and otherwise, m having answered, calls
// c.Abort. The status MiddlewareOptions.CountIf sees is c.Writer.Status().
// It allocates nothing of its own (but a small value per request when m
// counts responses), and panics when m is nil.
func Wrap(m *ratelimit.Middleware) gin.HandlerFunc {
	m = quick.Given("ginlimit.Wrap", m)
	return func(c *gin.Context) { handle(m, c, c.Request) }
}

// handle runs the rest of c's chain inside m.Handle and aborts the chain
// when m answered instead.
func handle(m *ratelimit.Middleware, c *gin.Context, r *http.Request) {
	admitted := false
	var panicked any
	m.Handle(c.Writer, r, func(next *http.Request) (status int, written int64) {
		admitted = true
		if next != r { // with ResultInContext
			c.Request = next
		}
		if !m.CountsResponses() {
			c.Next()
			return 0, 0
		}
		w := &hijackWatch{ResponseWriter: c.Writer}
		c.Writer = w
		defer func() { c.Writer = w.ResponseWriter }()
		status, panicked = quick.Run(c.Next, func() (int, bool) { return c.Writer.Status(), c.Writer.Written() })
		if w.hijacked {
			return status, -1
		}
		return status, int64(max(c.Writer.Size(), 0))
	})
	if !admitted {
		c.Abort()
	}
	if panicked != nil {
		panic(panicked) // once the response has begun, it counts by its status
	}
}

// KeyFunc is a [ratelimit.KeyFunc] of a Gin request's context: the key
// that identifies its client, or an error wrapping [ratelimit.ErrMissingKey].
type KeyFunc func(c *gin.Context) (string, error)

// New returns a Gin handler that limits requests with l, keyed by key and
// configured by opts (nil for the defaults), as [Wrap] does; it returns
// [ratelimit.NewMiddleware]'s errors. Reaching the *gin.Context costs two
// small allocations per request, which Wrap does not.
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

// hijackWatch is c.Writer while a request whose response counts runs: it
// notes that the handler took the connection over, whose bytes the
// writer does not see.
type hijackWatch struct {
	gin.ResponseWriter
	hijacked bool
}

func (w *hijackWatch) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := w.ResponseWriter.Hijack()
	w.hijacked = w.hijacked || err == nil
	return conn, rw, err
}
