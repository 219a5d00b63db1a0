// Package fakeclock is the fake clock of the repository's tests, for the
// tests that cannot import storetest (the root package's internal tests);
// storetest.Clock is this clock.
package fakeclock

import (
	"sync/atomic"
	"time"
)

// Epoch is the time a zero Clock reads: 2026-01-01T00:00:00Z.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is a clock that moves only when told. Its zero value reads Epoch.
// It is safe for concurrent use.
type Clock struct{ ns atomic.Int64 }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return Epoch.Add(time.Duration(c.ns.Load())) }

// Advance moves the clock by d, which may be negative.
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
