package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/tokenfair/ratelimit"
)

// quotaAlgorithms are the values of -algorithm that are calendar quotas:
// -burst tokens per calendar day or month, all back at once at the reset.
var quotaAlgorithms = []string{"daily", "monthly"}

// defaultT0 is the wall-clock time, in -tz, of time 0 of a quota's trace
// without -t0: a midnight that begins a day, a month and a year.
const defaultT0 = "1970-01-01T00:00:00"

// The range of time 0 of a quota: from there, a trace's 10⁹ seconds and a
// month after them stay within Unix nanoseconds (1678 to 2262).
var (
	minT0   = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)
	maxT0   = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
	t0Range = "from " + minT0.Format(layoutDate) + " to " + maxT0.Format(layoutDate) + " (UTC)"
)

// isQuota reports whether p is a calendar quota, whose Interval is 0.
func isQuota(p ratelimit.Policy) bool { return p.Limit.Interval() == 0 }

// quotaLimit returns the quota of n tokens a day or a month (alg) in loc.
func quotaLimit(alg string, n int64, loc *time.Location) ratelimit.Limit {
	if alg == "monthly" {
		return ratelimit.Monthly(n, loc)
	}
	return ratelimit.Daily(n, loc)
}

// quotaStart is the state at time 0 (Unix nanoseconds epoch) of a key of
// the quota p: full, any state not past the end of the period; empty, the
// state a Take of the whole quota leaves, which the reset at the period's
// end makes full again.
func quotaStart(p ratelimit.Policy, empty bool, epoch int64) int64 {
	if !empty {
		return epoch
	}
	_, end := p.Limit.Period(time.Unix(0, epoch))
	return end.UnixNano() + p.Limit.Burst()
}

// loadZone returns the zone that -tz names.
func loadZone(name string) (*time.Location, error) {
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("-tz %s: unknown time zone; want an IANA name such as Europe/Paris", strconv.Quote(name))
	}
	return loc, nil
}

// Layouts of -t0: with a UTC offset, an instant; without, a time in -tz.
const (
	layoutOffset = time.RFC3339
	layoutLocal  = "2006-01-02T15:04:05"
	layoutDate   = "2006-01-02"
)

// parseT0 parses -t0: a date and time in loc ("2026-03-28T23:30:00",
// decimals of a second allowed), a date (its first instant in loc), or a date
// and time with a UTC offset ("2026-10-25T02:30:00+02:00", "...Z"). A time
// in loc that its clocks skip, or show twice, is an error, which for the
// latter names the two offsets to choose from.
func parseT0(s string, loc *time.Location) (time.Time, error) {
	t, err := time.Parse(layoutOffset, s)
	if err != nil {
		t, err = localT0(s, loc)
	}
	if err != nil {
		return time.Time{}, err
	}
	if !inT0Range(t) {
		return time.Time{}, fmt.Errorf("-t0 %s: want a time %s", s, t0Range)
	}
	return t, nil
}

// localT0 parses s, a date and time or a date without an offset, in loc.
// A date whose midnight the clocks skip begins after the gap, as the
// quota's day does.
func localT0(s string, loc *time.Location) (time.Time, error) {
	wall, err := time.Parse(layoutLocal, s) // the wall clock, as if in UTC
	date := false
	if err != nil {
		wall, err = time.Parse(layoutDate, s)
		date = true
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("-t0 %s: want a time in -tz such as 2026-03-28T00:00:00, a date such as 2026-03-28, or a time with its offset such as 2026-03-28T00:00:00+01:00",
			strconv.Quote(s))
	}
	// The instants that loc shows as wall: one, none in a gap the clocks
	// skip, or two where they go back. The offsets in force two days
	// either side find both of a change.
	var found []time.Time
	var gapEnd time.Time // with none, where the clocks skip to
	for i, d := range []time.Duration{-48 * time.Hour, 48 * time.Hour} {
		_, off := wall.Add(d).In(loc).Zone()
		u := wall.Add(-time.Duration(off) * time.Second).In(loc)
		if i == 0 {
			gapEnd, _ = u.ZoneBounds()
		}
		if wallOf(u).Equal(wall) && (len(found) == 0 || !u.Equal(found[0])) {
			found = append(found, u)
		}
	}
	switch {
	case len(found) == 2:
		return time.Time{}, fmt.Errorf("-t0 %s: twice in %s, whose clocks go back: give the offset, %s or %s",
			s, loc, found[0].Format(time.RFC3339Nano), found[1].Format(time.RFC3339Nano))
	case len(found) == 1:
		return found[0], nil
	case date:
		return gapEnd, nil
	}
	return time.Time{}, fmt.Errorf("-t0 %s: no such time in %s, whose clocks skip it", s, loc)
}

// wallOf returns the wall clock that t reads, as a time in UTC.
func wallOf(t time.Time) time.Time {
	y, m, d := t.Date()
	h, mi, sec := t.Clock()
	return time.Date(y, m, d, h, mi, sec, t.Nanosecond(), time.UTC)
}

// inT0Range reports whether t can be time 0 of a quota.
func inT0Range(t time.Time) bool { return !t.Before(minT0) && t.Before(maxT0) }
