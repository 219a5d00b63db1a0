package ratelimit

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"time"
)

// maxSpan is the longest time a bucket may take to refill from empty, so
// that a bucket's depth and a request's cost in nanoseconds fit in an
// int64 with room to spare (a debt may go further: it saturates).
const maxSpan = 50 * 365 * 24 * time.Hour

// Limit is a rate and a capacity: a bucket earns n tokens every period, in
// whole nanoseconds per token ([Limit.Interval]), and holds at most Burst.
// Build it with [Per] or [PerSecond], or make it a calendar quota with
// [Daily] or [Monthly]. The zero Limit is invalid, as is a rate above about
// a million a second (docs/algorithms.md); [New] reports it.
type Limit struct {
	interval time.Duration // time to earn one token; 0 for a calendar quota
	burst    int64
	n        int64         // tokens per period, as written
	period   time.Duration // as written; 0 for a calendar quota
	cal      calendar      // the calendar period of a quota, or none: a rate
	loc      *time.Location
}

// calendar is the period of a calendar quota.
type calendar uint8

const (
	rate calendar = iota // not a quota: a rate
	day
	month
)

// calendars names each kind of Limit: its period, what it is, and the
// function that builds it.
var calendars = [...]struct{ period, kind, call string }{
	rate:  {"", "rate", ""},
	day:   {"day", "daily quota", "Daily"},
	month: {"month", "monthly quota", "Monthly"},
}

// maxQuota bounds a calendar quota: a state is the period's end plus what
// was spent in it, at most twice the quota with a debt, and must stay
// below the next period's end, 23 hours later at the least.
const maxQuota = 1_000_000_000_000

// Daily returns a quota of n tokens per calendar day in loc, from 00:00 to
// the next 00:00 (23 or 25 hours on a daylight-saving change): they all
// come back at once, at midnight. Its burst is n.
func Daily(n int64, loc *time.Location) Limit {
	return Limit{burst: n, n: n, cal: day, loc: loc}
}

// Monthly returns a quota of n tokens per calendar month in loc, from 00:00
// on the 1st to 00:00 on the 1st of the next month. Its burst is n.
func Monthly(n int64, loc *time.Location) Limit {
	return Limit{burst: n, n: n, cal: month, loc: loc}
}

// Period returns the calendar period of a [Daily] or [Monthly] quota that
// holds t: its first instant and the next period's; zero Times for a rate.
// Periods follow one another with neither gap nor overlap, even across
// odd clock changes (docs/algorithms.md#calendar-quotas).
func (l Limit) Period(t time.Time) (start, end time.Time) {
	if l.cal == rate || l.loc == nil {
		return time.Time{}, time.Time{}
	}
	y, m, d := t.In(l.loc).Date()
	dm, dd := time.Month(0), 1 // from one period to the next
	if l.cal == month {
		d, dm, dd = 1, 1, 0
	}
	start, end = midnight(y, m, d, l.loc), midnight(y, m+dm, d+dd, l.loc)
	if t.Before(start) {
		start, end = midnight(y, m-dm, d-dd, l.loc), start
	}
	return start, end
}

// midnight returns the first instant of the day y-m-d in loc (normalised
// as time.Date does): the first from which the clocks there show that day
// or a later one for good. That is 00:00; the end of a daylight-saving gap
// that skips it; the later 00:00 when the clocks go back from after it to
// the day before (the first when they go back to 00:00 itself); and for a
// day the clocks skip whole (Pacific/Apia's 30 December 2011), the first
// instant of the next day.
func midnight(y int, m time.Month, d int, loc *time.Location) time.Time {
	want := time.Date(y, m, d, 0, 0, 0, 0, time.UTC) // 00:00 on the clocks in loc, read as UTC
	wall := func(t time.Time) time.Time {            // what the clocks in loc show at t, read as UTC
		_, off := t.Zone()
		return t.UTC().Add(time.Duration(off) * time.Second)
	}
	const far = 48 * time.Hour // more than any zone's offset and any change of clock
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	if start, end := t.ZoneBounds(); (start.IsZero() || t.Sub(start) >= far) && (end.IsZero() || end.Sub(t) >= far) {
		return t // no change of clock for two days either side: 00:00, once
	}
	// Walk loc's zones from two days before, when the clocks show an
	// earlier day, keeping the last instant they reached 00:00, until a
	// zone begins a day past it: no change of clock takes them back further.
	var begin time.Time
	for t = want.Add(-far).In(loc); ; {
		_, next := t.ZoneBounds()
		if w := wall(t); w.Before(want) {
			begin = time.Time{}
			if t = t.Add(want.Sub(w)); !next.IsZero() && !t.Before(next) {
				t = next // the zone ends before its clocks show 00:00
				continue
			}
		}
		if begin.IsZero() {
			begin = t
		}
		if next.IsZero() || !wall(next).Before(want.Add(24*time.Hour)) {
			return begin
		}
		t = next
	}
}

// periodEnd returns the end of the calendar period that holds now, in Unix
// nanoseconds.
func (l Limit) periodEnd(now int64) int64 {
	_, end := l.Period(time.Unix(0, now))
	return end.UnixNano()
}

// Per returns a Limit of n tokens per period, with a burst of n.
func Per(n int64, period time.Duration) Limit {
	l := Limit{burst: n, n: n, period: period}
	if n > 0 && period > 0 {
		// period/n rounded half up, without overflowing for a long period.
		q, r := int64(period)/n, int64(period)%n
		if r >= n-r {
			q++
		}
		l.interval = time.Duration(q)
	}
	return l
}

// PerSecond returns a Limit of n tokens per second, with a burst of n.
func PerSecond(n int64) Limit { return Per(n, time.Second) }

// WithBurst returns a copy of l with a capacity of burst tokens; for a
// calendar quota, a quota of burst tokens.
func (l Limit) WithBurst(burst int64) Limit {
	l.burst = burst
	if l.cal != rate {
		l.n = burst
	}
	return l
}

// Burst returns the capacity: the most tokens that can be spent at once.
func (l Limit) Burst() int64 { return l.burst }

// Interval returns the time it takes to earn one token: the period divided
// by n, rounded to the nearest nanosecond; 0 for a calendar quota.
func (l Limit) Interval() time.Duration { return l.interval }

// units are the periods that have a name of their own.
var units = [...]struct {
	d          time.Duration
	unit, call string
}{
	{time.Second, "s", "PerSecond(%d)"},
	{time.Minute, "min", "Per(%d, time.Minute)"},
	{time.Hour, "h", "Per(%d, time.Hour)"},
	{24 * time.Hour, "d", "Per(%d, 24*time.Hour)"},
}

// String returns l as it was written: "3/s", "5/s burst 10", "2/3s",
// "100/min", "2500/day (Europe/Paris)". An invalid Limit is written as the
// call that built it, such as "PerSecond(-5) (invalid)".
func (l Limit) String() string {
	if l.validate() != nil {
		return l.call() + " (invalid)"
	}
	if l.cal != rate {
		return strconv.FormatInt(l.n, 10) + "/" + calendars[l.cal].period + " (" + l.loc.String() + ")"
	}
	unit := l.period.String()
	for _, u := range units {
		if l.period == u.d {
			unit = u.unit
		}
	}
	s := strconv.FormatInt(l.n, 10) + "/" + unit
	if l.burst != l.n {
		s += " burst " + strconv.FormatInt(l.burst, 10)
	}
	return s
}

// call returns the expression that built l, for error messages.
func (l Limit) call() string {
	if l == (Limit{}) {
		return "Limit{}"
	}
	if l.cal != rate {
		loc := "nil"
		if l.loc != nil {
			loc = strconv.Quote(l.loc.String())
		}
		return fmt.Sprintf("%s(%d, %s)", calendars[l.cal].call, l.n, loc)
	}
	s := fmt.Sprintf("Per(%d, %v)", l.n, l.period)
	for _, u := range units {
		if l.period == u.d {
			s = fmt.Sprintf(u.call, l.n)
		}
	}
	if l.burst != l.n {
		s += fmt.Sprintf(".WithBurst(%d)", l.burst)
	}
	return s
}

// validate reports why l cannot be used, naming the call that built it.
func (l Limit) validate() error {
	var why string
	switch {
	case l == (Limit{}):
		why = "the zero Limit; build one with Per or PerSecond"
	case l.cal != rate && l.loc == nil:
		why = "a nil *time.Location; use time.UTC or time.LoadLocation"
	case l.cal != rate && (l.n <= 0 || l.n > maxQuota):
		why = fmt.Sprintf("the quota must be from 1 to %d", int64(maxQuota))
	case l.cal != rate:
		return nil
	case l.n <= 0:
		why = "the number of tokens must be positive"
	case l.period <= 0:
		why = "the period must be positive"
	case l.interval <= 0:
		why = "faster than one token a nanosecond"
	case l.roundingOff():
		why = fmt.Sprintf("a token every %v is more than 0.1%% off the rate as written; at most about 10⁶ tokens a second can be exact", l.interval)
	case l.burst < 1:
		why = "the burst must be at least 1"
	case l.burst > int64(maxSpan/l.interval):
		why = fmt.Sprintf("an empty bucket would take %d × %v to fill, more than 50 years", l.burst, l.interval)
	default:
		return nil
	}
	return fmt.Errorf("%s: %s", l.call(), why)
}

// roundingOff reports whether rounding period/n to whole nanoseconds moved
// the rate by more than 0.1%: |interval × n − period| > period / 1000.
func (l Limit) roundingOff() bool {
	hi, lo := bits.Mul64(uint64(l.interval), uint64(l.n))
	if hi != 0 {
		return true
	}
	diff := int64(lo) - int64(l.period)
	if lo > math.MaxInt64 {
		return true
	}
	return max(diff, -diff) > int64(l.period)/1000
}

// span returns the time an empty bucket takes to fill: burst × interval
// (0 for a calendar quota).
func (l Limit) span() time.Duration { return time.Duration(l.burst) * l.interval }
