package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// MaxSpan is the longest time a bucket may take to refill from empty:
// Burst × Interval must not exceed it. A bucket's state is at most one span
// ahead of now and a decision moves it on by at most one more, so the bound
// keeps a Unix-nanosecond timestamp plus two spans inside int64 until 2162.
const MaxSpan = 50 * 365 * 24 * time.Hour

// Limit is a rate and a capacity: a bucket holds at most Burst tokens and
// earns one token every Interval. Representing the rate as a whole number of
// nanoseconds per token keeps every decision exact integer arithmetic.
//
// Build a Limit with [Per], [PerSecond], [PerMinute], [PerHour], [PerDay],
// [Every] or [Rate], and change its capacity with [Limit.WithBurst]. The zero
// Limit is invalid; constructors that take a Limit call [Limit.Validate].
type Limit struct {
	// Interval is the time it takes to earn one token, the inverse of the rate.
	Interval time.Duration
	// Burst is the capacity: the most tokens that can be spent at once.
	Burst int64
}

// Per returns a Limit of n tokens per period with a burst of n. The interval
// is period/n rounded to the nearest nanosecond. A non-positive n or period
// gives an invalid Limit.
func Per(n int64, period time.Duration) Limit {
	if n <= 0 || period <= 0 {
		return Limit{Burst: n}
	}
	return Limit{Interval: time.Duration((int64(period) + n/2) / n), Burst: n}
}

// PerSecond returns a Limit of n tokens per second with a burst of n.
func PerSecond(n int64) Limit { return Per(n, time.Second) }

// PerMinute returns a Limit of n tokens per minute with a burst of n.
func PerMinute(n int64) Limit { return Per(n, time.Minute) }

// PerHour returns a Limit of n tokens per hour with a burst of n.
func PerHour(n int64) Limit { return Per(n, time.Hour) }

// PerDay returns a Limit of n tokens per day (24 hours) with a burst of n.
func PerDay(n int64) Limit { return Per(n, 24*time.Hour) }

// Every returns a Limit of one token every interval with a burst of 1.
func Every(interval time.Duration) Limit { return Limit{Interval: interval, Burst: 1} }

// Rate returns a Limit of r tokens per second, for rates that are not whole
// numbers (0.5 is one token every two seconds). The interval is 1s/r rounded
// to the nearest nanosecond and the burst is max(1, ⌊r⌋). A rate that is not
// positive and finite gives an invalid Limit.
func Rate(r float64) Limit {
	if !(r > 0) || math.IsInf(r, 1) {
		return Limit{Burst: 1}
	}
	burst := int64(1)
	if r >= 2 {
		burst = int64(min(r, math.MaxInt64/2))
	}
	iv := math.Round(float64(time.Second) / r)
	if iv >= math.MaxInt64 {
		return Limit{Interval: math.MaxInt64, Burst: burst}
	}
	return Limit{Interval: time.Duration(iv), Burst: burst}
}

// WithBurst returns a copy of l with capacity burst.
func (l Limit) WithBurst(burst int64) Limit {
	l.Burst = burst
	return l
}

// ErrInvalidLimit is wrapped by every error that reports an invalid [Limit].
var ErrInvalidLimit = errors.New("ratelimit: invalid limit")

// Validate reports why l cannot be used, or nil: the interval must be
// positive (a rate that is positive and finite), the burst at least 1, and
// Burst × Interval at most [MaxSpan].
func (l Limit) Validate() error {
	switch {
	case l.Interval <= 0:
		return fmt.Errorf("%w: rate must be positive and finite (interval %v)", ErrInvalidLimit, l.Interval)
	case l.Burst < 1:
		return fmt.Errorf("%w: burst must be at least 1, got %d", ErrInvalidLimit, l.Burst)
	case l.Burst > int64(MaxSpan/l.Interval):
		return fmt.Errorf("%w: burst %d × interval %v exceeds %v", ErrInvalidLimit, l.Burst, l.Interval, MaxSpan)
	}
	return nil
}

// Span returns the time an empty bucket takes to fill: Burst × Interval.
func (l Limit) Span() time.Duration { return time.Duration(l.Burst) * l.Interval }

// String describes l compactly: "5/s burst 10", "100/min burst 100",
// "1 every 7s burst 1".
func (l Limit) String() string {
	if l.Interval > 0 {
		for _, u := range [...]struct {
			d    time.Duration
			name string
		}{{time.Second, "s"}, {time.Minute, "min"}, {time.Hour, "h"}, {24 * time.Hour, "d"}} {
			if u.d%l.Interval == 0 {
				return strconv.FormatInt(int64(u.d/l.Interval), 10) + "/" + u.name + " burst " + strconv.FormatInt(l.Burst, 10)
			}
		}
	}
	return "1 every " + l.Interval.String() + " burst " + strconv.FormatInt(l.Burst, 10)
}
