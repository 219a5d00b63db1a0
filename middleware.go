package ratelimit

import (
	"cmp"

	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tokenfair/ratelimit/internal/clientkey"
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
		m.limits.check(l, cfg.Logger)
	}
	return m, nil
}

// Handle decides r, sets the rate-limit header fields on w and, when r may
// proceed, calls next with the request to serve (r, or a copy carrying the
// decision with MiddlewareOptions.ResultInContext); next runs the rest of
// the chain and returns the response's status and the bytes of its body
// (both 0 unless CountsResponses; the bytes negative, -1, when the handler
// took the connection over, as http.Hijacker does: the request then keeps
// what it reserved). Otherwise Handle writes the
// whole answer, through OnDeny or OnError, and next never runs. A request
// that a LeakyShape policy delays is held until its turn, or refused at
// once when its wait would outlast its context's deadline or the server's
// WriteTimeout, or MaxQueued requests wait already. It is the one entry
// point of every adapter; docs/frameworks.md says what an adapter must do
// when next panics.
func (m *Middleware) Handle(w http.ResponseWriter, r *http.Request, next func(r *http.Request) (status int, written int64)) {
	if m.cfg.lists != nil {
		switch v, err := m.cfg.lists.check(r); {
		case err != nil: // as the key function's errors: KeyByIP would fail alike
			m.undecided(w, r, err)
			return
		case v == blocked:
			forbid(w)
			return
		case v == safe:
			next(r)
			return
		}
	}
	if m.cfg.Skip != nil {
		skip, err := m.skip(r)
		if err != nil {
			m.undecided(w, r, err)
			return
		}
		if skip {
			next(r)
			return
		}
	}
	var start time.Time
	if m.cfg.Observe != nil {
		start = time.Now()
	}
	d := m.decide(r)
	m.answer(w, r, next, start, &d)
}

// answer observes d, which was decided from start, writes the header
// fields and answers r: through the error or the deny handler, or by
// running next once the request's turn has come.
//
// An allowed request first takes what it holds while it waits or runs: an
// in-flight slot (MaxInFlight) until next returns or panics, a place in
// the shaping queues (MaxQueued) until its wait ends. It takes them before
// it is observed and answered, since a refusal for want of them is a
// refusal.
func (m *Middleware) answer(w http.ResponseWriter, r *http.Request, next func(*http.Request) (int, int64), start time.Time, d *decision) {
	if d.err == nil && d.res.Allowed && m.cfg.inflight != nil {
		var release func()
		if release, d.res, d.err = m.acquire(r, d); release != nil {
			defer release()
		}
	}
	if d.err == nil && d.res.Allowed && d.res.Delay > 0 {
		m.enqueue(r, d)
		defer m.dequeue(d) // freed when the wait ends; this, after a panic before
	}
	if m.cfg.Observe != nil {
		m.cfg.Observe(r, Event{Limiter: d.lim, KeyHash: keyHash(d.key), Result: d.res, Err: d.err, Elapsed: time.Since(start)})
	}
	if d.err != nil {
		m.fail(w, r, d.err)
		return
	}
	if m.keys != nil {
		m.keys.see(d.key, m.cfg.Logger)
	}
	if !d.res.Allowed && m.cfg.RetryJitter > 0 {
		j := time.Duration(rand.Int64N(int64(m.cfg.RetryJitter)))
		d.res.RetryAfter = addSaturating(d.res.RetryAfter, j)
		d.res.ResetAfter = max(d.res.ResetAfter, d.res.RetryAfter)
	}
	m.writeHeaders(w.Header(), d.lim, d.res)
	if !d.res.Allowed {
		m.refuse(w, r, d.res)
		return
	}
	if d.res.Delay > 0 {
		err := sleep(r.Context(), d.res.Delay)
		m.dequeue(d)
		if err != nil {
			d.refund(r, d.lim.allUnits())
			m.cfg.OnError(w, r, fmt.Errorf("%w: %w", ErrWaitAbandoned, err))
			return
		}
	}
	if !m.cfg.ResultInContext && !m.CountsResponses() {
		next(r)
		return
	}
	m.run(r, next, d)
}

// undecided observes and answers a request that failed before its
// decision (the client lists, MiddlewareOptions.Skip) because of err.
func (m *Middleware) undecided(w http.ResponseWriter, r *http.Request, err error) {
	if m.cfg.Observe != nil {
		m.cfg.Observe(r, Event{Limiter: m.limiter, Err: err})
	}
	m.fail(w, r, err)
}

// fail answers a request that could not be decided because of err.
func (m *Middleware) fail(w http.ResponseWriter, r *http.Request, err error) {
	if m.cfg.customOnError {
		m.cfg.errors.noteRefusal(r, err)
	}
	m.cfg.OnError(w, r, err)
}

// acquire takes an in-flight slot for the request that d allowed
// (MaxInFlight), counted in its limiter's occupancy (internal/occupancy)
// while held, and returns the function that releases it. When no slot
// is free it gives back what d spent and returns the in-flight refusal;
// when the SlotStore fails, an error wrapping ErrStore.
func (m *Middleware) acquire(r *http.Request, d *decision) (func(), Result, error) {
	f, key, occ := m.cfg.inflight, d.key, &d.lim.occ
	if m.cfg.Slots == nil {
		if f.acquire(key) {
			occ.InFlight.Add(1)
			return func() { occ.InFlight.Add(-1); f.release(key) }, d.res, nil
		}
	} else {
		held, ok, err := f.acquireShared(r.Context(), m.cfg.Slots, m.cfg.SlotLease, key)
		if err != nil {
			d.refund(r, d.lim.allUnits())
			return nil, Result{}, fmt.Errorf("%w: in-flight slots: %w", ErrStore, err)
		}
		if ok {
			occ.InFlight.Add(1)
			return func() { occ.InFlight.Add(-1); held.release() }, d.res, nil
		}
	}
	d.refund(r, d.lim.allUnits())
	return nil, f.refused, nil
}

// skip reports whether MiddlewareOptions.Skip exempts r; a panic in it becomes an
// error wrapping errPanic.
func (m *Middleware) skip(r *http.Request) (skip bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: in Skip: %v", errPanic, p)
		}
	}()
	return m.cfg.Skip(r), nil
}

// decide finds the limiter, key and cost of r and takes the decision. A
// panic in the key or cost function becomes an error wrapping errPanic.
func (m *Middleware) decide(r *http.Request) (d decision) {
	d.lim = m.limiter
	defer func() {
		if p := recover(); p != nil {
			d.err = fmt.Errorf("%w: %v", errPanic, p)
		}
	}()
	if m.cfg.LimiterFor != nil {
		if picked := m.cfg.LimiterFor(r); picked != nil {
			d.lim = picked
			if m.limits != nil {
				m.limits.check(d.lim, m.cfg.Logger) // the limiters it picks, the first time each
			}
		}
	}
	key, err := m.key(r)
	if err != nil || key == "" {
		d.err = cmp.Or(err, errKeyFuncEmpty)
		return d
	}
	d.key = key
	cost, err := m.cost(r, requests, m.cfg.Cost)
	if err != nil {
		d.err = err
		return d
	}
	units := d.lim.units
	if len(units) == 1 {
		if units[0] != requests {
			if cost, d.err = m.cost(r, units[0], m.cfg.Costs[units[0]]); d.err != nil {
				return d
			}
		}
		d.cost = cost
		d.res, d.err = d.lim.Take(r.Context(), key, cost) // it refuses an empty key and a cost above a burst
		return d
	}
	d.costs = make([]int64, len(units))
	for u, unit := range units {
		if unit == requests {
			d.costs[u] = cost
		} else if d.costs[u], d.err = m.cost(r, unit, m.cfg.Costs[unit]); d.err != nil {
			return d
		}
	}
	d.res, d.err = d.lim.takeRound(r.Context(), &round{key: key, costs: d.costs})
	return d
}

// cost returns what r reserves in unit by f (MiddlewareOptions.Cost or
// Costs; nil: 1), or why it cannot: f failed or gave a cost below 1 (Take
// would only look at the bucket, or refuses a negative cost: an admitted
// request costs at least 1; free requests are exempted with Skip).
func (m *Middleware) cost(r *http.Request, unit string, f func(*http.Request) (int64, error)) (int64, error) {
	if f == nil {
		return 1, nil
	}
	cost, err := f(r)
	if err == nil && cost >= 1 {
		return cost, nil
	}
	what := "cost"
	if unit != requests {
		what = "cost in " + unit
	}
	if err != nil {
		return 0, &clientkey.Error{Err: fmt.Errorf("%w: the %s function failed: %w", ErrBadRequest, what, err),
			Kind: clientkey.KindCost, Detail: "the " + what + " function failed"}
	}
	below := "below 1"
	if cost < 0 {
		below = "negative"
	}
	return 0, &clientkey.Error{Err: fmt.Errorf("%w: %s %d is %s", ErrBadRequest, what, cost, below),
		Kind: clientkey.KindCost, Detail: fmt.Sprintf("the request's %s, %d, is %s", what, cost, below)}
}

// now returns the time of MiddlewareOptions.Clock.
func (m *Middleware) now() time.Time {
	if m.cfg.Clock != nil {
		return m.cfg.Clock()
	}
	return time.Now()
}

// errKeyFuncEmpty is the refusal of a request whose key function returned
// an empty key.
var errKeyFuncEmpty error = &clientkey.Error{Err: fmt.Errorf("%w: the key function returned an empty key", ErrMissingKey),
	Kind: clientkey.KindEmptyKey, Detail: "the key function returned an empty key"}

// CountsResponses reports whether the status and bytes next returns to
// Handle matter (MiddlewareOptions.CountIf, a policy counting
// "content-bytes", or MiddlewareOptions.LimiterFor, whose limiters may),
// so an adapter can skip learning them.
func (m *Middleware) CountsResponses() bool { return m.counts }
