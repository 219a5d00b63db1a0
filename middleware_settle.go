package ratelimit

// How an admitted request's costs are settled once they are known: by its
// handler (Settle), or by its response (MiddlewareOptions.CountIf, and the
// policies counting "content-bytes").

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
)

// settlement is an admitted request's decision, in its context with
// MiddlewareOptions.ResultInContext, and the state of its costs: the set
// of units settled (bit u: the limiter's units[u]), and whether the
// response is complete, after which nothing more is settled.
type settlement struct {
	d     decision
	state atomic.Uint64
}

// completeBit is the bit of a settlement's state that the response sets.
const completeBit = 1 << 63

// resultKey is the context key of the *settlement that ResultFrom and
// Settle read.
type resultKey struct{}

// ResultFrom returns the decision that a Middleware with
// MiddlewareOptions.ResultInContext put in ctx, and whether there is one.
func ResultFrom(ctx context.Context) (Result, bool) {
	if s, ok := ctx.Value(resultKey{}).(*settlement); ok {
		return s.d.res, true
	}
	return Result{}, false
}

// Settle sets the real cost in unit of the admitted request whose context
// ctx is, under a Middleware with ResultInContext, as [Limiter.Settle]
// does: less than reserved is given back, more taken even past empty; 0
// settles at 1. It does nothing and returns an error for a negative cost,
// "content-bytes" (the response settles it) or a unit the request's
// policies do not count, a unit already settled, a complete response, or a
// ctx without a decision.
func Settle(ctx context.Context, unit string, cost int64) error {
	s, ok := ctx.Value(resultKey{}).(*settlement)
	if !ok {
		return errors.New("ratelimit: Settle: no decision in the context; set MiddlewareOptions.ResultInContext")
	}
	u := slices.Index(s.d.lim.units, unit)
	switch {
	case cost < 0:
		return fmt.Errorf("ratelimit: Settle: negative cost %d of %s", cost, unit)
	case u < 0:
		return fmt.Errorf("ratelimit: Settle: no policy of the request counts the unit %q (its units: %q)", unit, s.d.lim.units)
	case unit == contentBytes:
		return fmt.Errorf("ratelimit: Settle(%q, %d): the response settles its bytes", unit, cost)
	}
	bit := uint64(1) << u
	switch old := s.state.Or(bit); {
	case old&completeBit != 0:
		return fmt.Errorf("ratelimit: Settle(%q, %d): the response is complete", unit, cost)
	case old&bit != 0:
		return fmt.Errorf("ratelimit: Settle(%q, %d): the request's cost in %s is settled already", unit, cost, unit)
	}
	return s.d.lim.adjust(context.WithoutCancel(ctx), "Settle", s.d.reserved(), s.d.res, bit, max(cost, 1))
}

// refund gives back, even if r's context has ended, all that took, the
// allowed result of d's take, spent in the units of the set units: the
// request turned out not to count (MiddlewareOptions.CountIf), could not
// run, or was refused after its take.
func (d *decision) refund(r *http.Request, took Result, units uint64) {
	_ = d.lim.adjust(context.WithoutCancel(r.Context()), "Refund", d.reserved(), took, units, 0)
}

// allUnits is the set of every unit of l.
func (l *Limiter) allUnits() uint64 { return 1<<len(l.units) - 1 }

// finish ends the decided request of d: it gives back what d spent when
// the request was refused or abandoned after its take (d.back), or runs
// next for an allowed one and settles its costs (run).
func (m *Middleware) finish(r *http.Request, next func(*http.Request) (int, int64), d *decision) {
	switch {
	case d.back.Allowed:
		d.refund(r, d.back, d.lim.allUnits())
	case d.err != nil || !d.res.Allowed:
	case !m.cfg.ResultInContext && !m.CountsResponses():
		next(r)
	default:
		m.run(r, next, d)
	}
}

// run runs next for the admitted request of d and settles its costs when
// the response is complete, in the units its handler did not (Settle):
// nothing when next's status does not count (MiddlewareOptions.CountIf)
// or next panics with CountIf; in "content-bytes", whatever the status,
// the bytes of the body sent (at least 1; none for HEAD), or what it
// reserved when next took the connection over (written < 0) or panicked.
// A store's error settling only loses that give-back or charge: the
// response is out.
func (m *Middleware) run(r *http.Request, next func(*http.Request) (int, int64), d *decision) {
	var state *atomic.Uint64 // nil: no Settle can race the response's settlement
	if m.cfg.ResultInContext {
		s := &settlement{d: *d}
		d, state = &s.d, &s.state
		r = r.WithContext(context.WithValue(r.Context(), resultKey{}, s))
	}
	// complete ends the request's settlement and returns the units that
	// are the response's to settle.
	complete := func() uint64 {
		all := d.lim.allUnits()
		if state == nil {
			return all
		}
		return all &^ state.Or(completeBit)
	}
	if !m.CountsResponses() {
		defer complete()
		next(r)
		return
	}
	var bytes uint64 // the set of the unit content-bytes, if the limiter has it
	if u := slices.Index(d.lim.units, contentBytes); u >= 0 {
		bytes = 1 << u
	}
	done := false
	defer func() {
		if !done {
			if units := complete() &^ bytes; m.cfg.CountIf != nil {
				d.refund(r, d.res, units) // next panicked
			}
		}
	}()
	status, written := next(r)
	done = true
	units := complete()
	if m.cfg.CountIf != nil && !m.cfg.CountIf(status) {
		d.refund(r, d.res, units&^bytes)
	}
	if r.Method == http.MethodHead {
		written = min(written, 0) // net/http sends no body, whatever the handler wrote
	}
	if units&bytes != 0 && written >= 0 {
		_ = d.lim.adjust(context.WithoutCancel(r.Context()), "Settle", d.reserved(), d.res, bytes, max(written, 1))
	}
}
