package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/tokenfair/ratelimit/internal/clientkey"
)

// Middleware is the HTTP side of a [Limiter], shared by every framework
// adapter: it finds the key and cost of a request, takes a decision, writes
// the rate-limit header fields and, when the request may not proceed, the
// whole answer. Adapters (package nethttp, and the ginlimit and echolimit
// modules) only plumb a framework's request and response into
// [Middleware.Handle], so every framework behaves the same. A Middleware is
// safe for concurrent use.
type Middleware struct {
	limiter *Limiter
	key     KeyFunc
	cfg     config
	keys    *dominance  // nil when the one-key warning is off
	limits  *limitsSeen // nil when the shared-policy-name warning is off
}

// NewMiddleware returns a Middleware that limits requests with l, keyed by
// key and configured by opts (nil for the defaults). It returns an error,
// naming the field and value at fault, for a nil limiter or key function
// or invalid options.
func NewMiddleware(l *Limiter, key KeyFunc, opts *Options) (*Middleware, error) {
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
	m := &Middleware{limiter: l, key: key, cfg: cfg}
	if !cfg.quiet.off(warnOneKey) {
		m.keys = new(dominance)
	}
	if !cfg.quiet.off(warnSharedPolicyName) {
		m.limits = new(limitsSeen)
		m.limits.check(l, cfg.Logger)
	}
	return m, nil
}

// Handle runs r through the limiter and, when it may proceed, calls next,
// which must run the rest of the chain and return the response's status
// code. It is the one entry point of every framework adapter.
//
// Handle sets the rate-limit header fields on w. When the request is
// refused, or cannot be decided, Handle writes the whole response (through
// the deny or the error handler) and next never runs. A panic in the key or
// cost function is answered like an error (500 by default).
//
// A request admitted by a shaping policy (LeakyShape) with a Delay is held
// until its turn. If the request's context ends first (the client went
// away, or a server deadline passed), Handle stops waiting and answers
// through the error handler with ErrWaitAbandoned; next never runs. The
// request's place in the queue stays spent: the requests behind it keep
// their times, and the slot is not given back.
//
// With Options.Block and Safe, a request from a blocked client is answered
// 403 and a request from a safe client runs next without a decision,
// before anything else.
//
// With Options.CountIf, the cost is taken before next runs, so a spent
// budget refuses the request, and given back after it returns if its status
// does not count. With Options.MaxInFlight, the request holds a slot while
// next runs, released when next returns or panics.
func (m *Middleware) Handle(w http.ResponseWriter, r *http.Request, next func() (status int)) {
	if m.cfg.lists != nil {
		switch v, err := m.cfg.lists.check(r); {
		case err != nil:
			// As the key function's errors: KeyByIP would fail alike.
			if m.cfg.Observe != nil {
				m.cfg.Observe(r, Event{Limiter: m.limiter, Err: err})
			}
			m.fail(w, r, err)
			return
		case v == blocked:
			forbid(w)
			return
		case v == safe:
			next()
			return
		}
	}
	if m.cfg.Skip != nil {
		skip, err := m.skip(r)
		if err != nil {
			m.cfg.OnError(w, r, err)
			return
		}
		if skip {
			next()
			return
		}
	}
	var start time.Time
	if m.cfg.Observe != nil {
		start = time.Now()
	}
	lim, key, cost, res, err := m.decide(r)
	var release func()
	if err == nil && res.Allowed {
		// An in-flight refusal is a refusal: take the slot before the
		// decision is observed and answered.
		if release, res, err = m.acquire(r, lim, key, cost, res); release != nil {
			defer release()
		}
	}
	if m.cfg.Observe != nil {
		m.cfg.Observe(r, Event{Limiter: lim, KeyHash: keyHash(key), Result: res, Err: err, Elapsed: time.Since(start)})
	}
	if err != nil {
		m.fail(w, r, err)
		return
	}
	if m.keys != nil {
		m.keys.see(key, m.cfg.Logger)
	}
	if !res.Allowed && m.cfg.RetryJitter > 0 {
		j := time.Duration(rand.Int64N(int64(m.cfg.RetryJitter)))
		res.RetryAfter += j
		res.ResetAfter = max(res.ResetAfter, res.RetryAfter)
	}
	m.writeHeaders(w.Header(), lim, res)
	if !res.Allowed {
		m.refuse(w, r, res)
		return
	}
	if res.Delay > 0 {
		if err := sleep(r.Context(), res.Delay); err != nil {
			m.cfg.OnError(w, r, fmt.Errorf("%w: %w", ErrWaitAbandoned, err))
			return
		}
	}
	if m.cfg.CountIf == nil {
		next()
		return
	}
	counted := false
	defer func() {
		if !counted { // next did not return normally, or its status does not count
			lim.giveBack(r.Context(), key, cost, res)
		}
	}()
	counted = m.cfg.CountIf(next())
}

// fail answers a request that could not be decided because of err.
func (m *Middleware) fail(w http.ResponseWriter, r *http.Request, err error) {
	if m.cfg.ownOnError {
		m.cfg.errors.noteRefusal(r, err)
	}
	m.cfg.OnError(w, r, err)
}

// acquire takes an in-flight slot for an allowed request (MaxInFlight)
// and returns the function that releases it. When no slot is free it gives
// back what the decision spent and returns the in-flight refusal; when the
// SlotStore fails, an error wrapping ErrStore.
func (m *Middleware) acquire(r *http.Request, lim *Limiter, key string, cost int64, res Result) (func(), Result, error) {
	f := m.cfg.inflight
	if f == nil {
		return nil, res, nil
	}
	if m.cfg.Slots == nil {
		if f.acquire(key) {
			return func() { f.release(key) }, res, nil
		}
	} else {
		held, ok, err := f.acquireShared(r.Context(), m.cfg.Slots, m.cfg.SlotLease, key)
		if err != nil {
			lim.giveBack(r.Context(), key, cost, res)
			return nil, Result{}, fmt.Errorf("%w: in-flight slots: %w", ErrStore, err)
		}
		if ok {
			return func() { f.releaseShared(r.Context(), m.cfg.Slots, held) }, res, nil
		}
	}
	lim.giveBack(r.Context(), key, cost, res)
	return nil, f.refused, nil
}

// writeHeaders writes the rate-limit header fields of res, decided by lim:
// none for a degraded decision, or when every policy is dry-run and hidden.
func (m *Middleware) writeHeaders(h http.Header, lim *Limiter, res Result) {
	switch {
	case res.Degraded:
		return
	case m.cfg.DryRunHeaders && res.Results() != nil:
		b := res.Results()[binding(res.Results(), lim.all)]
		writeHeaders(h, m.cfg.Headers, b, lim.fields[1], lim.quotasOf(b.Policy))
	case len(lim.enforce) == 0 && !m.cfg.DryRunHeaders:
		return
	default:
		writeHeaders(h, m.cfg.Headers, res, lim.fields[0], lim.quotasOf(res.Policy))
	}
	if m.cfg.inflight != nil {
		m.cfg.inflight.list(h, m.cfg.Headers)
	}
}

// refuse answers a refused request: Retry-After, then the deny handler.
func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, res Result) {
	w.Header()["Retry-After"] = intField(retryAfterSeconds(res.RetryAfter))
	m.cfg.OnDeny(w, r, res)
}

// skip reports whether Options.Skip exempts r; a panic in it becomes an
// error wrapping ErrPanic.
func (m *Middleware) skip(r *http.Request) (skip bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: in Skip: %v", ErrPanic, p)
		}
	}()
	return m.cfg.Skip(r), nil
}

// decide finds the limiter, key and cost of r and takes the decision. A
// panic in the key or cost function becomes an error wrapping ErrPanic.
func (m *Middleware) decide(r *http.Request) (lim *Limiter, key string, cost int64, res Result, err error) {
	lim = m.limiter
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrPanic, p)
		}
	}()
	if m.cfg.LimiterFor != nil {
		if picked := m.cfg.LimiterFor(r); picked != nil {
			lim = picked
			if m.limits != nil {
				m.limits.check(lim, m.cfg.Logger) // the limiters it picks, the first time each
			}
		}
	}
	if key, err = m.key(r); err != nil {
		return lim, "", 0, Result{}, err
	}
	cost = 1
	if m.cfg.Cost != nil {
		if cost, err = m.cfg.Cost(r); err != nil {
			return lim, key, 0, Result{}, &clientkey.Error{Err: fmt.Errorf("%w: the cost function failed: %w", ErrBadRequest, err),
				Kind: clientkey.KindCost, Detail: "the cost function failed"}
		}
	}
	res, err = lim.Take(r.Context(), key, cost) // it refuses an empty key and a bad cost
	return lim, key, cost, res, err
}

// sleep waits for d or until ctx ends, and returns ctx's error in the latter
// case.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// CountsResponses reports whether the status that Handle's next returns
// matters (Options.CountIf). Adapters that must wrap the response writer to
// learn the status can skip that work when it does not.
func (m *Middleware) CountsResponses() bool { return m.cfg.CountIf != nil }
