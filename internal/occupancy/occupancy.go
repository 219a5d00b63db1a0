// Package occupancy counts, for each ratelimit.Limiter, the requests that
// hold a place in a Middleware while they wait or run: a place in a shaping
// queue (LeakyShape), or an in-flight slot (MaxInFlight, MaxInFlightTotal).
// The Middleware keeps the counts; the observers of this repository
// (otellimit) read them through Of.
package occupancy

import "sync/atomic"

// Counts are the requests of one Limiter that hold a place now, across
// every Middleware that uses it.
type Counts struct {
	// Queued counts the requests waiting in shaping queues.
	Queued atomic.Int64
	// InFlight counts the requests holding an in-flight slot, from their
	// admission until their handler returns (their wait in a shaping queue
	// included).
	InFlight atomic.Int64
}

// Of returns the Counts of l, a *ratelimit.Limiter, or nil for any other
// value. Package ratelimit sets it when it is initialised.
var Of func(l any) *Counts
