// Package credit keeps, for the memory store, what a bucket needs beside
// its state to give tokens back exactly (ratelimit.RefundStore): its
// credit, the span given back to it, and the span given back per take for
// up to eight takes given back (the closest kept as one past eight).
// take.lua keeps the same for Redis.
package credit

import (
	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
)

// Bucket is what a bucket keeps beside its state for its give-backs. The
// zero Bucket is a bucket's that was never given back to. It is not safe
// for concurrent use.
type Bucket struct {
	// Credit is the span given back to the bucket since it was last
	// forgotten; a take's Result has Until = its next state + Credit.
	Credit int64
	// The takes given back, by their Until, and what was given back of
	// each: a take's give-back must not count what was given back of the
	// takes after it, which did not move it. Past n takes, the two whose
	// Untils are closest are kept as one, at the smaller Until: that only
	// makes the give-backs of the takes between them smaller (never
	// larger).
	until, give [n]int64
}

const n = 8

// later returns the span given back of the takes after the one whose Until
// is until.
func (b *Bucket) later(until int64) int64 {
	var sum int64
	for i := range n {
		if b.until[i] > until {
			sum = algo.Add(sum, b.give[i])
		}
	}
	return sum
}

// remember records that give was given back of the take whose Until is
// until, at now. It forgets the takes whose Until has passed (no take
// before them can still be given back anything); when n takes remain, it
// keeps the two whose Untils are closest as one, at the smaller Until.
func (b *Bucket) remember(until, give, now int64) {
	var u, g [n + 1]int64
	k := 0
	for i := range n {
		if b.until[i] > now {
			u[k], g[k] = b.until[i], b.give[i]
			k++
		}
	}
	u[k], g[k] = until, give
	k++
	for i := k - 1; i > 0 && u[i] < u[i-1]; i-- { // by Until
		u[i], u[i-1], g[i], g[i-1] = u[i-1], u[i], g[i-1], g[i]
	}
	if k > n {
		m := 0 // merge m and m+1
		for i := 1; i < n; i++ {
			if u[i+1]-u[i] < u[m+1]-u[m] {
				m = i
			}
		}
		g[m] = algo.Add(g[m], g[m+1])
		copy(u[m+1:], u[m+2:])
		copy(g[m+1:], g[m+2:])
		k--
	}
	b.until, b.give = [n]int64{}, [n]int64{}
	copy(b.until[:], u[:k])
	copy(b.give[:], g[:k])
}

// full makes the bucket, full since state, full at now: its credit shrinks
// by the time it has been full, and the takes it remembers, which can get
// nothing back, are forgotten (the Until of the takes to come may be
// smaller than theirs). It returns the new state, now.
func (b *Bucket) full(state, now int64) int64 {
	*b = Bucket{Credit: max(b.Credit-(now-state), 0)}
	return now
}

// Refund gives back cost tokens of the take whose Result had Until until
// to a bucket of p whose state is state, at now, and returns its new state.
func (b *Bucket) Refund(p *ratelimit.Policy, state, now, cost, until int64) (next int64) {
	if state <= now {
		return b.full(state, now)
	}
	next = p.Refund(state, now, cost, until-b.Credit+b.later(until))
	if give := state - next; give > 0 {
		b.Credit = algo.Add(b.Credit, give)
		b.remember(until, give, now)
	}
	return next
}

// Reset makes the bucket of state state full at now and returns its new
// state, now: what it owed becomes credit, so that nothing taken before is
// given back.
func (b *Bucket) Reset(state, now int64) (next int64) {
	if state <= now {
		return b.full(state, now)
	}
	*b = Bucket{Credit: algo.Add(b.Credit, state-now)}
	return now
}
