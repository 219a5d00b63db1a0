package ratelimit

// What an allowed request spent, adjusted once its real cost is known:
// given back (Refund), or set, even past empty (Settle).

import (
	"context"
	"fmt"
	"slices"
	"strconv"
)

// Refund gives back cost tokens of took, an allowed Result of this
// Limiter's Take for key, under each policy, as x/time/rate's
// Reservation.Cancel does. The Refunds of one took must add up to at most
// what it spent under each policy, under the key Take was given (of
// TakeUnits, use Settle). It does nothing for cost ≤ 0, a refused or
// degraded took, or a store that is no [RefundStore]; its errors wrap
// ErrMissingKey (empty key) or ErrStore, or name the policy of a took of
// another Limiter.
func (l *Limiter) Refund(ctx context.Context, key string, cost int64, took Result) error {
	results, err := l.spent("Refund", key, took, false)
	rs, ok := l.store.(RefundStore)
	if err != nil || !ok || cost <= 0 || results == nil {
		return err
	}
	if err := l.giveBack(ctx, rs, l.all, &round{key: key, cost: cost, results: results}); err != nil {
		return storeError(err)
	}
	return nil
}

// Settle sets the cost in unit of took, an allowed Result of this Limiter's
// Take or TakeUnits for key that reserved reserved of unit: each policy
// counting unit gives back what it spent above cost, or takes the rest even
// past empty, so that the key waits until the debt is repaid
// (docs/algorithms.md#charges-past-empty). A cost of 0 settles at 1.
// Settle each unit of a took once. It returns an error for a negative cost
// or a unit no policy counts, and Refund's errors.
func (l *Limiter) Settle(ctx context.Context, key, unit string, reserved, cost int64, took Result) error {
	u := slices.Index(l.units, unit)
	switch {
	case u < 0:
		return fmt.Errorf("ratelimit: Settle: no policy counts the unit %q (the units: %q)", unit, l.units)
	case cost < 0:
		return fmt.Errorf("ratelimit: Settle: negative cost %d of %s", cost, unit)
	}
	return l.adjust(ctx, "Settle", &round{key: key, cost: reserved}, took, 1<<u, max(cost, 1))
}

// adjust makes cost the cost of took, which reserved what rd says, under
// the policies whose units are in the set units (bit u: l.units[u]): each
// gives back what it reserved above cost, or takes the rest past empty. A
// cost of 0 gives back all: the request did not count.
func (l *Limiter) adjust(ctx context.Context, op string, rd *round, took Result, units uint64, cost int64) error {
	results, err := l.spent(op, rd.key, took, true)
	if err != nil {
		return err
	}
	rs, _ := l.store.(RefundStore)
	var first error
	for i, r := range results {
		if units&(1<<l.unitOf[i]) == 0 || !r.Allowed {
			continue
		}
		switch reserved := rd.costOf(l, i); {
		case cost < reserved && rs != nil:
			err = l.giveBack(ctx, rs, []int{i}, &round{key: rd.key, cost: reserved - cost, results: results})
		case cost > reserved:
			err = l.charge(ctx, i, rd.key, cost-reserved, r)
		}
		if err != nil && first == nil {
			first = storeError(err)
		}
	}
	return first
}

// spent returns the results of took, for a Refund or Settle (op) of key:
// one per policy, nil when took spent nothing (or, unless degraded, was
// decided while the store failed), or an error, such as for one policy's
// result of a Limiter of several.
func (l *Limiter) spent(op, key string, took Result, degraded bool) ([]Result, error) {
	if key == "" {
		return nil, errEmptyKey
	}
	if !took.Allowed || took.Degraded && !degraded {
		return nil, nil
	}
	if l.owner(took) < 0 {
		name := "none"
		if took.Policy != nil {
			name = strconv.Quote(took.Policy.Name)
		}
		return nil, fmt.Errorf("ratelimit: %s: the Result is not of this Limiter's Take (its policy: %s)", op, name)
	}
	switch {
	case took.Results == nil && len(l.policies) == 1:
		return []Result{took}, nil
	case len(took.Results) == len(l.policies):
		return took.Results, nil
	}
	return nil, fmt.Errorf("ratelimit: %s: the Result is policy %q's alone; pass the Result Take returned, which holds each of the %d policies'", op, took.Policy.Name, len(l.policies))
}

// owner returns the index of the policy that decided r: r.Policy's, or for
// a fallback's local decision (Result.Local), whose Policy is a share of
// one of the Limiter's, that of the policy of its name; -1 when none.
func (l *Limiter) owner(r Result) int {
	if i := l.index(r.Policy); i >= 0 || !r.Local || r.Policy == nil {
		return i
	}
	return slices.Index(l.names, r.Policy.Name)
}

// index returns the index of the policy among l's that p is, or a copy of
// with a key's limit (Policy.LimitFor), or -1 when there is none.
func (l *Limiter) index(p *Policy) int {
	for i := range l.policies {
		if &l.policies[i] == p {
			return i
		}
	}
	for i := range l.keyLimits {
		if l.owns(i, p) {
			return i
		}
	}
	return -1
}

// owns reports whether q decides for policy i: the policy itself, or a
// copy of it that policyFor made.
func (l *Limiter) owns(i int, q *Policy) bool {
	p := &l.policies[i]
	if q == p {
		return true
	}
	if p.LimitFor == nil || q == nil || q.Name != p.Name {
		return false
	}
	c := &l.keyLimits[i]
	kept, ok := c.get(q.Limit)
	return ok && kept == q || c.full(maxKeyLimits)
}
