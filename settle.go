package ratelimit

// How an admitted request's cost is settled once its real cost is known:
// by its handler (Settle), or by its response (MiddlewareOptions.CountIf,
// MiddlewareOptions.CountBytes).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
)

// settlement is an admitted request's decision, in its context with
// MiddlewareOptions.ResultInContext, and the state of its cost: open until
// the handler settles it or the response is complete.
type settlement struct {
	d     decision
	state atomic.Int32
}

const (
	costOpen int32 = iota
	costSettled
	costComplete
)

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

// Settle sets the real cost of the admitted request whose context ctx is,
// under a Middleware with MiddlewareOptions.ResultInContext: less than it
// reserved gives the difference back, more takes the rest even past empty
// (see [Limiter.Charge]). An admitted request costs at least 1: a cost of
// 0 settles at 1. It does nothing and returns an error for a negative
// cost, a request already settled, one whose response is complete, or a
// ctx without a decision.
func Settle(ctx context.Context, cost int64) error {
	s, ok := ctx.Value(resultKey{}).(*settlement)
	switch {
	case !ok:
		return errors.New("ratelimit: Settle: no decision in the context; set MiddlewareOptions.ResultInContext")
	case cost < 0:
		return fmt.Errorf("ratelimit: Settle: negative cost %d", cost)
	case !s.state.CompareAndSwap(costOpen, costSettled):
		if s.state.Load() == costSettled {
			return fmt.Errorf("ratelimit: Settle(%d): the request's cost is settled already", cost)
		}
		return fmt.Errorf("ratelimit: Settle(%d): the response is complete", cost)
	}
	return s.d.settle(context.WithoutCancel(ctx), cost)
}

// settle makes cost, at least 1, the cost of d, which reserved d.cost.
func (d *decision) settle(ctx context.Context, cost int64) error {
	cost = max(cost, 1)
	switch {
	case cost < d.cost:
		return d.lim.Refund(ctx, d.key, d.cost-cost, d.res)
	case cost > d.cost:
		return d.lim.Charge(ctx, d.key, cost-d.cost, d.res)
	}
	return nil
}

// refund gives back all that d spent, after the request turned out not to
// count (MiddlewareOptions.CountIf) or could not run, even if r's context
// has ended.
func (d *decision) refund(r *http.Request) {
	_ = d.lim.Refund(context.WithoutCancel(r.Context()), d.key, d.cost, d.res)
}

// run runs next for the admitted request of d and settles its cost when
// the response is complete, unless its handler did (Settle): nothing when
// next's status does not count (MiddlewareOptions.CountIf) or next panics
// with CountIf; with MiddlewareOptions.CountBytes, the bytes written (at
// least 1), or what it reserved when next took the connection over
// (written < 0). A store's error settling only loses that give-back or
// charge: the response is out.
func (m *Middleware) run(r *http.Request, next func(*http.Request) (int, int64), d *decision) {
	var state *atomic.Int32 // nil: no Settle can race the response's settlement
	if m.cfg.ResultInContext {
		s := &settlement{d: *d}
		d, state = &s.d, &s.state
		r = r.WithContext(context.WithValue(r.Context(), resultKey{}, s))
	}
	// complete ends the request's settlement and reports whether it is the
	// response's to make.
	complete := func() bool { return state == nil || state.Swap(costComplete) == costOpen }
	if !m.CountsResponses() {
		defer complete()
		next(r)
		return
	}
	done := false
	defer func() {
		if !done && complete() && m.cfg.CountIf != nil {
			d.refund(r) // next panicked
		}
	}()
	status, written := next(r)
	done = true
	if !complete() {
		return
	}
	switch {
	case m.cfg.CountIf != nil && !m.cfg.CountIf(status):
		d.refund(r)
	case m.cfg.CountBytes && written >= 0:
		_ = d.settle(context.WithoutCancel(r.Context()), written)
	}
}
