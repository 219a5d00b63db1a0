package ratelimit

import (
	"errors"
	"net/http"
	"slices"
	"sync/atomic"
	"time"
)

// Middleware is the HTTP side of a [Limiter], shared by every framework
// adapter (nethttp, ginlimit, echolimit): it finds a request's key and cost,
// decides, writes the rate-limit header fields and, when the request may
// not proceed, the whole answer. A Middleware is safe for concurrent use.
type Middleware struct {
	limiter *Limiter
	key     KeyFunc
	cfg     config
	keys    *dominance   // nil when the one-key warning is off
	limits  *limitsSeen  // nil when the shared-policy-name warning is off
	queued  atomic.Int64 // requests waiting in shaping queues (MiddlewareOptions.MaxQueued)
	headers headerCaches // the header values of each limiter
	counts  bool         // CountsResponses
}

// NewMiddleware returns a Middleware that limits requests with l, keyed by
// key and configured by opts (nil for the defaults). It returns an error
// naming the field and value at fault for a nil l or key or invalid opts.
func NewMiddleware(l *Limiter, key KeyFunc, opts *MiddlewareOptions) (*Middleware, error) {
	if l == nil {
		return nil, errors.New("ratelimit: NewMiddleware: nil limiter")
	}
	if key == nil {
		return nil, errors.New("ratelimit: NewMiddleware: nil key function")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.inflight != nil {
		if err := checkInflightName(l); err != nil {
			return nil, err
		}
	}
	m := &Middleware{limiter: l, key: key, cfg: cfg}
	m.headers.own, m.headers.ownH = l, newLimitHeaders(l)
	m.counts = cfg.CountIf != nil || cfg.LimiterFor != nil || slices.Contains(l.units, contentBytes)
	if !cfg.Quiet {
		m.keys = new(dominance)
		m.limits = new(limitsSeen)
		m.limits.note(l, cfg.Logger)
	}
	return m, nil
}

// Handle decides r, sets the rate-limit header fields on w and, when r may
// proceed, calls next with the request to serve (r, or a copy carrying the
// decision with MiddlewareOptions.ResultInContext); next runs the rest of
// the chain and returns the response's status and body bytes (both 0
// unless CountsResponses; bytes -1 when the handler hijacked the
// connection). Otherwise Handle writes the whole answer, through OnDeny or
// OnError, and next never runs. A LeakyShape delay holds r until its turn.
// Handle is every adapter's one entry point; docs/frameworks.md says what
// an adapter must do.
func (m *Middleware) Handle(w http.ResponseWriter, r *http.Request, next func(r *http.Request) (status int, written int64)) {
	d := m.decide(r)
	m.answer(w, r, next, &d)
}

// now returns the time of MiddlewareOptions.Clock.
func (m *Middleware) now() time.Time {
	if m.cfg.Clock != nil {
		return m.cfg.Clock()
	}
	return time.Now()
}

// CountsResponses reports whether the status and bytes next returns to
// Handle matter (CountIf, a "content-bytes" policy, or LimiterFor, whose
// limiters may have one), so an adapter can skip learning them.
func (m *Middleware) CountsResponses() bool { return m.counts }
