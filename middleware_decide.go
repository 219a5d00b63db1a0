package ratelimit

// Deciding a request: its limiter, key and costs, and the take.

import (
	"cmp"
	"fmt"
	"net/http"
	"time"

	"github.com/tokenfair/ratelimit/internal/clientkey"
)

// decision is what Handle learned of a request: the limiter that decided
// it, its key and costs, and the result or the error.
type decision struct {
	lim     *Limiter
	exempt  verdict // blocked or safe by the client lists (Skip: safe), and not decided
	start   time.Time
	key     string
	cost    int64   // what it reserved in each unit, unless costs
	costs   []int64 // what it reserved in each unit of lim, or nil
	res     Result
	err     error
	decided bool   // its limiter was asked: the error, if any, is of the key, cost or store
	queued  bool   // it holds a place in the shaping queues (enqueue)
	back    Result // refused or abandoned after its take: the allowed result whose spend goes back
}

// reserved returns what d reserved, for the settlement of its costs.
func (d *decision) reserved() *round { return &round{key: d.key, cost: d.cost, costs: d.costs} }

// decide exempts r (the client lists, MiddlewareOptions.Skip), or finds
// the limiter, key and cost of r and takes the decision. A panic in the
// key or cost function becomes an error wrapping errPanic.
func (m *Middleware) decide(r *http.Request) (d decision) {
	d.lim = m.limiter
	if m.cfg.lists != nil {
		if d.exempt, d.err = m.cfg.lists.classify(r); d.err != nil || d.exempt != unlisted {
			return d // a lists error is as the key function's: KeyByIP would fail alike
		}
	}
	if m.cfg.Skip != nil {
		skip, err := m.skip(r)
		if d.err = err; err != nil || skip {
			d.exempt = safe
			return d
		}
	}
	if m.cfg.Observe != nil {
		d.start = time.Now()
	}
	d.decided = true
	defer func() {
		if p := recover(); p != nil {
			d.err = fmt.Errorf("%w: %v", errPanic, p)
		}
	}()
	if m.cfg.LimiterFor != nil {
		if picked := m.cfg.LimiterFor(r); picked != nil {
			d.lim = picked
			if m.limits != nil {
				m.limits.note(d.lim, m.cfg.Logger) // the limiters it picks, the first time each
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
	d.res, d.err = d.lim.decideRound(r.Context(), &round{key: key, costs: d.costs})
	return d
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

// errKeyFuncEmpty is the refusal of a request whose key function returned
// an empty key.
var errKeyFuncEmpty error = &clientkey.Error{Err: fmt.Errorf("%w: the key function returned an empty key", ErrMissingKey),
	Kind: clientkey.KindEmptyKey, Detail: "the key function returned an empty key"}
