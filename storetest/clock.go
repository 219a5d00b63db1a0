package storetest

import (
	"time"

	"github.com/tokenfair/ratelimit/internal/fakeclock"
)

// Clock is a fake clock that moves only when told, for stores and tests
// that take a clock as a func() time.Time (pass c.Now). Its zero value
// reads 2026-01-01T00:00:00Z. It is safe for concurrent use.
type Clock struct{ c fakeclock.Clock }

// epoch is the time a zero Clock reads.
var epoch = fakeclock.Epoch

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return c.c.Now() }

// Advance moves the clock by d, which may be negative.
func (c *Clock) Advance(d time.Duration) { c.c.Advance(d) }
