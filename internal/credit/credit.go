// Package credit keeps, for the stores of this module, what a bucket needs
// beside its state to give tokens back exactly (ratelimit.RefundStore): its
// credit, the span given back to it, and the span given back per take for
// the few takes refunded last.
package credit

import "github.com/tokenfair/ratelimit"

// Later holds the spans given back of the last takes refunded, by their
// Until: a take's give-back must not count what was given back of the
// takes after it, which did not move it. It keeps n of them at most;
// forgetting one only makes the give-backs of earlier takes smaller (never
// larger). The zero Later holds none. It is not safe for concurrent use.
type Later struct {
	until, give [n]int64
}

const n = 4

// since returns the span given back of the takes after the one whose
// Until is until.
func (l *Later) since(until int64) int64 {
	var sum int64
	for i := range n {
		if l.until[i] > until {
			sum += l.give[i]
		}
	}
	return sum
}

// add records that give was given back of the take whose Until is until,
// at now, in place of a take whose Until has passed (no take before it can
// still be given back anything) or else of the one with the smallest
// Until, which is forgotten.
func (l *Later) add(until, give, now int64) {
	at := 0
	for i := range n {
		if l.until[i] <= now {
			l.until[i], l.give[i] = 0, 0
		}
		if l.until[i] < l.until[at] {
			at = i
		}
	}
	l.until[at], l.give[at] = until, give
}

// Refund gives back cost tokens of the take whose Result had Until until
// to a bucket of p whose state is state and credit is credit, at now. It
// returns the new state and credit, and records the give-back in later
// (which may be nil: it then counts all that was given back since the
// take, as is safe). A full bucket's credit shrinks by the time it has
// been full, its state moves to now and later is emptied: the Until of the
// takes to come may be smaller than those it held.
func Refund(p *ratelimit.Policy, state, credit int64, later *Later, now, cost, until int64) (next, nextCredit int64) {
	if state <= now {
		if later != nil {
			*later = Later{} // of takes that can get nothing back, and before any to come
		}
		return now, max(credit-(now-state), 0)
	}
	end := until - credit
	if later != nil {
		end += later.since(until)
	}
	next = p.Refund(state, now, cost, end)
	if give := state - next; give > 0 {
		credit += give
		if later != nil {
			later.add(until, give, now)
		}
	}
	return next, credit
}

// Reset returns the state and credit of a bucket of state state and credit
// credit made full at now: what it owed becomes credit, so that nothing
// taken before is given back.
func Reset(state, credit, now int64) (next, nextCredit int64) {
	if state <= now {
		return now, max(credit-(now-state), 0)
	}
	return now, credit + state - now
}
