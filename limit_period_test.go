package ratelimit_test

import (
	"context"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
	_ "time/tzdata" // the zones of the Period tests, on any machine

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

// periodLoc loads the zone named name from the real tzdata.
func periodLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err, "LoadLocation(%q)", name)
	return loc
}

// periodTime parses s in RFC 3339, nanoseconds allowed.
func periodTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return v
}

// In America/St_Johns on 29 October 2006 the clocks went back from 00:01
// NDT to 23:01 NST: they showed the 28th again from 02:31 to 03:30 UTC.
// That hour, and the minute of the 29th before it, are in the 28th's
// period, which ends when the clocks show the 29th for good (00:00 NST,
// 03:30 UTC): its end is after each of them.
func TestPeriodStJohnsRepeatedHour(t *testing.T) {
	loc := periodLoc(t, "America/St_Johns")
	l := ratelimit.Daily(3, loc)
	start := periodTime(t, "2006-10-28T00:00:00-02:30").In(loc)
	end := periodTime(t, "2006-10-29T00:00:00-03:30").In(loc)   // 03:30 UTC
	first := periodTime(t, "2006-10-29T00:00:00-02:30").In(loc) // 02:30 UTC: the clocks show the 29th for a minute
	for _, at := range []time.Time{first, first.Add(59 * time.Second), end.Add(-1)} {
		gotStart, gotEnd := l.Period(at)
		assert.True(t, start.Equal(gotStart) && end.Equal(gotEnd), "%v.Period(%v) = %v, %v, want %v, %v", l, at, gotStart, gotEnd, start, end)
	}
	for at := first.Add(time.Minute); at.Before(end); at = at.Add(time.Minute) { // the repeated hour
		gotStart, gotEnd := l.Period(at)
		if !assert.True(t, gotEnd.After(at), "%v.Period(%v): end %v, want after it", l, at, gotEnd) ||
			!assert.True(t, start.Equal(gotStart) && end.Equal(gotEnd), "%v.Period(%v) = %v, %v, want %v, %v", l, at, gotStart, gotEnd, start, end) {
			break
		}
	}
	nextEnd := periodTime(t, "2006-10-30T00:00:00-03:30")
	gotStart, gotEnd := l.Period(end)
	assert.True(t, end.Equal(gotStart) && nextEnd.Equal(gotEnd), "%v.Period(%v) = %v, %v, want %v, %v", l, end, gotStart, gotEnd, end, nextEnd)
}

// Through a Limiter and a memory store, which forgets a bucket whose
// period has ended: of 100 requests sent in St_Johns's repeated hour of 28
// October 2006, a Daily(3) admits 3, and one more when the clocks show the
// 29th for good.
func TestQuotaStJohnsRepeatedHour(t *testing.T) {
	loc := periodLoc(t, "America/St_Johns")
	now := periodTime(t, "2006-10-28T23:01:00-03:30") // 02:31 UTC, the first minute repeated
	store, err := memorystore.New(&memorystore.Options{Clock: func() time.Time { return now }})
	require.NoError(t, err)
	lim, err := ratelimit.New(store, ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(3, loc)})
	require.NoError(t, err)
	ctx := context.Background()
	admitted := 0
	for range 100 {
		res, err := lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		if res.Allowed {
			admitted++
		}
		now = now.Add(35 * time.Second)
	}
	assert.Equal(t, 3, admitted, "requests admitted of 100 from 23:01 NST to 23:59 NST on the 28th")
	now = periodTime(t, "2006-10-29T00:00:00-03:30")
	res, err := lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "Take at %v: the 29th's quota", now.In(loc))
}

// Period gives the day or month that holds at where the clocks skip or
// repeat a midnight: from start (RFC 3339) to end.
func TestPeriodMidnightChanges(t *testing.T) {
	for _, tc := range []struct {
		zone           string
		month          bool
		at, start, end string
		wantLength     time.Duration
	}{
		// America/St_Johns: 00:01 NDT on 7 November 2010 became 23:01 NST
		// on the 6th, and 00:01 NDT on 1 November 2009 became 23:01 NST on
		// 31 October: the 7th, and November 2009, begin at the second
		// midnight.
		{"America/St_Johns", false, "2010-11-06T23:30:00-03:30", "2010-11-06T00:00:00-02:30", "2010-11-07T00:00:00-03:30", 25 * time.Hour},
		{"America/St_Johns", false, "2010-11-07T00:00:30-02:30", "2010-11-06T00:00:00-02:30", "2010-11-07T00:00:00-03:30", 25 * time.Hour},
		{"America/St_Johns", true, "2009-10-31T23:30:00-03:30", "2009-10-01T00:00:00-02:30", "2009-11-01T00:00:00-03:30", 31*24*time.Hour + time.Hour},
		{"America/St_Johns", true, "2009-11-01T00:00:30-02:30", "2009-10-01T00:00:00-02:30", "2009-11-01T00:00:00-03:30", 31*24*time.Hour + time.Hour},
		{"America/St_Johns", true, "2009-11-01T00:00:00-03:30", "2009-11-01T00:00:00-03:30", "2009-12-01T00:00:00-03:30", 30 * 24 * time.Hour},

		// Antarctica/Casey: 02:00 +11 on 5 March 2010 became 23:00 +08 on
		// the 4th, which lasts until the clocks show the 5th again: 27 hours.
		{"Antarctica/Casey", false, "2010-03-05T01:30:00+11:00", "2010-03-04T00:00:00+11:00", "2010-03-05T00:00:00+08:00", 27 * time.Hour},

		// America/Havana: 00:00 became 01:00 on 1 April 2012, and 01:00
		// became 00:00 on 1 November 2026 (the month begins at the first
		// midnight: the clocks never show October again).
		{"America/Havana", true, "2012-03-31T23:59:59-05:00", "2012-03-01T00:00:00-05:00", "2012-04-01T01:00:00-04:00", 31 * 24 * time.Hour},
		{"America/Havana", true, "2012-04-01T01:00:00-04:00", "2012-04-01T01:00:00-04:00", "2012-05-01T00:00:00-04:00", 30*24*time.Hour - time.Hour},
		{"America/Havana", true, "2026-11-01T00:30:00-05:00", "2026-11-01T00:00:00-04:00", "2026-12-01T00:00:00-05:00", 30*24*time.Hour + time.Hour},

		// America/Asuncion: 00:00 became 01:00 on 1 October 2017.
		{"America/Asuncion", true, "2017-10-15T12:00:00-03:00", "2017-10-01T01:00:00-03:00", "2017-11-01T00:00:00-03:00", 31*24*time.Hour - time.Hour},

		// Pacific/Apia skipped 30 December 2011: 23:59:59 -10 on the 29th
		// became 00:00 +14 on the 31st. That day is no period: the 29th
		// lasts its 24 hours and ends when the 31st begins; December lasts
		// 30 days.
		{"Pacific/Apia", false, "2011-12-29T12:00:00-10:00", "2011-12-29T00:00:00-10:00", "2011-12-31T00:00:00+14:00", 24 * time.Hour},
		{"Pacific/Apia", false, "2011-12-31T00:00:00+14:00", "2011-12-31T00:00:00+14:00", "2012-01-01T00:00:00+14:00", 24 * time.Hour},
		{"Pacific/Apia", true, "2011-12-29T12:00:00-10:00", "2011-12-01T00:00:00-10:00", "2012-01-01T00:00:00+14:00", 30 * 24 * time.Hour},
	} {
		l := ratelimit.Daily(1, periodLoc(t, tc.zone))
		if tc.month {
			l = ratelimit.Monthly(1, periodLoc(t, tc.zone))
		}
		at, start, end := periodTime(t, tc.at), periodTime(t, tc.start), periodTime(t, tc.end)
		assert.Equal(t, tc.wantLength, end.Sub(start), "%v: the period of %s", l, tc.at)
		for _, in := range []time.Time{at, start, end.Add(-1)} {
			gotStart, gotEnd := l.Period(in)
			assert.True(t, start.Equal(gotStart) && end.Equal(gotEnd), "%v.Period(%v) = %v, %v, want %v, %v", l, in, gotStart, gotEnd, start, end)
		}
		if _, before := l.Period(start.Add(-1)); !before.Equal(start) {
			t.Errorf("%v.Period(%v): the period before ends at %v, want %v", l, start.Add(-1), before, start)
		}
		if after, _ := l.Period(end); !after.Equal(end) {
			t.Errorf("%v.Period(%v): the period after starts at %v, want %v", l, end, after, end)
		}
	}
}

// periodZones have midnights that the clocks skipped or repeated from 2005
// to 2027, several on the 1st of a month (St_Johns and Goose_Bay back
// across midnight, Casey by 3 hours; Havana, Santiago, Asuncion, Beirut,
// Sao_Paulo, Tehran, Cairo, Amman and Azores forward over it or back to
// it; Apia skipped a whole day), and two that have none.
var periodZones = []string{
	"America/St_Johns", "America/Goose_Bay", "Antarctica/Casey",
	"America/Havana", "America/Santiago", "America/Asuncion", "Asia/Beirut",
	"America/Sao_Paulo", "Asia/Tehran", "Africa/Cairo", "Asia/Amman", "Atlantic/Azores",
	"Pacific/Apia", "Europe/Paris", "Asia/Kolkata",
}

// Over 2005 to 2027, in each of periodZones, the days and months follow
// one another with neither gap nor overlap (Period(end) starts at end),
// and every instant is in the period Period gives, at or after its start
// and before its end: checked every hour from 26 hours before to 26 after
// each change of clock, every 5 minutes in the 2 hours either side and
// a nanosecond either side, and every 97 hours throughout. A period begins
// when the clocks show its date at 00:00, or a change of clock takes them
// past it, never to show an earlier date again. A day lasts 24 hours, more
// or less the change of clock in it (from 21 to 27 hours in Casey); the
// day the clocks skip (Apia's 30 December 2011) has no period, so no
// period lasts two days. A month lasts its days, more or less 3 hours (or
// Apia's December 2011, one day less).
func TestPeriodZoneHistory(t *testing.T) {
	from, to := time.Date(2005, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, zone := range periodZones {
		loc := periodLoc(t, zone)
		var samples []time.Time
		for at := from.In(loc); ; {
			_, next := at.ZoneBounds()
			if next.IsZero() || !next.Before(to) {
				break
			}
			samples = append(samples, next.Add(-1), next, next.Add(1))
			for d := -2 * time.Hour; d <= 2*time.Hour; d += 5 * time.Minute {
				samples = append(samples, next.Add(d))
			}
			for d := -26 * time.Hour; d <= 26*time.Hour; d += time.Hour {
				samples = append(samples, next.Add(d))
			}
			at = next
		}
		for at := from; at.Before(to); at = at.Add(97 * time.Hour) {
			samples = append(samples, at)
		}
		for _, monthly := range []bool{false, true} {
			l := ratelimit.Daily(1, loc)
			if monthly {
				l = ratelimit.Monthly(1, loc)
			}
			starts := checkPeriodChain(t, l, loc, monthly, from.AddDate(0, -2, 0), to.AddDate(0, 2, 0))
			checkPeriodSamples(t, l, loc, starts, samples)
		}
	}
}

// periodDate returns the date the clocks in loc show at t, as 00:00 UTC.
func periodDate(t time.Time, loc *time.Location) time.Time {
	y, m, d := t.In(loc).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// checkPeriodChain follows l's periods in loc, days or months, from the
// one that holds from to the one after to, checks each, and returns their
// starts. It stops at the first period that fails.
func checkPeriodChain(t *testing.T, l ratelimit.Limit, loc *time.Location, monthly bool, from, to time.Time) []time.Time {
	t.Helper()
	apia := loc.String() == "Pacific/Apia"
	start, end := l.Period(from)
	starts := []time.Time{start}
	for !start.After(to) {
		label, local := periodDate(start, loc), start.In(loc)
		length, next := end.Sub(start), periodDate(end, loc)
		want := label.AddDate(0, 0, 1) // the date of the next period
		lo, hi := 21*time.Hour, 27*time.Hour
		if monthly {
			want = label.AddDate(0, 1, 0)
			days := want.Sub(label)
			lo, hi = days-3*time.Hour, days+3*time.Hour
			if apia && label.Equal(time.Date(2011, 12, 1, 0, 0, 0, 0, time.UTC)) {
				lo, hi = days-24*time.Hour, days-24*time.Hour // the 30th was skipped
			}
		} else if apia && label.Equal(time.Date(2011, 12, 29, 0, 0, 0, 0, time.UTC)) {
			want = label.AddDate(0, 0, 2) // the 30th was skipped
		}
		if zoneStart, _ := start.ZoneBounds(); local.Hour()+local.Minute()+local.Second()+local.Nanosecond() != 0 && !zoneStart.Equal(start) {
			t.Errorf("%v: the period from %v begins neither at 00:00 nor at a change of clock", l, local)
			return starts
		}
		if monthly && label.Day() != 1 || !next.Equal(want) {
			t.Errorf("%v: the period from %v (%s) is followed by that of %s, want %s", l, local, label.Format(time.DateOnly), next.Format(time.DateOnly), want.Format(time.DateOnly))
			return starts
		}
		if !periodDate(start.Add(-1), loc).Before(label) {
			t.Errorf("%v: the clocks show %v a nanosecond before the period of %s begins", l, start.Add(-1).In(loc), label.Format(time.DateOnly))
			return starts
		}
		if length < lo || length > hi {
			t.Errorf("%v: the period from %v lasts %v, want from %v to %v", l, local, length, lo, hi)
			return starts
		}
		if last, lastEnd := l.Period(end.Add(-1)); !last.Equal(start) || !lastEnd.Equal(end) {
			t.Errorf("%v.Period(%v) = %v, %v, want %v, %v", l, end.Add(-1), last, lastEnd, start, end)
			return starts
		}
		prevEnd := end
		if start, end = l.Period(prevEnd); !start.Equal(prevEnd) {
			t.Errorf("%v.Period(%v) starts at %v, want %v: the end of the period before", l, prevEnd, start, prevEnd)
			return starts
		}
		starts = append(starts, start)
	}
	return starts
}

// checkPeriodSamples checks that l.Period(at), for each of samples, is
// the period of starts that holds it, and that the clocks at at show the
// date of its start or a later one. It stops at the first that fails.
func checkPeriodSamples(t *testing.T, l ratelimit.Limit, loc *time.Location, starts, samples []time.Time) {
	t.Helper()
	for _, at := range samples {
		i := sort.Search(len(starts), func(i int) bool { return starts[i].After(at) }) - 1
		if i < 0 || i+1 >= len(starts) {
			t.Errorf("%v: %v is outside the periods followed", l, at)
			return
		}
		start, end := l.Period(at)
		switch {
		case at.Before(start) || !at.Before(end):
			t.Errorf("%v.Period(%v) = %v, %v: outside", l, at, start, end)
		case !start.Equal(starts[i]) || !end.Equal(starts[i+1]):
			t.Errorf("%v.Period(%v) = %v, %v, want %v, %v", l, at, start, end, starts[i], starts[i+1])
		case periodDate(at, loc).Before(periodDate(start, loc)):
			t.Errorf("%v.Period(%v) = %v, %v: the clocks show an earlier date than at its start", l, at.In(loc), start, end)
		default:
			continue
		}
		return
	}
}

// A Limiter's quota keeps the last period its decisions found: decisions
// in any order (the clock going back too, and across the changes of
// clock) give the period's end that Period gives.
func TestQuotaPeriodKept(t *testing.T) {
	rng := rand.New(rand.NewPCG(40, 41))
	for _, name := range []string{"America/St_Johns", "Europe/Paris", "Pacific/Apia"} {
		loc, err := time.LoadLocation(name)
		require.NoError(t, err)
		for _, l := range []ratelimit.Limit{ratelimit.Daily(5, loc), ratelimit.Monthly(5, loc)} {
			store, err := memorystore.New(nil)
			require.NoError(t, err)
			lim, err := ratelimit.New(store, ratelimit.Policy{Name: "q", Limit: l})
			require.NoError(t, err)
			p := &lim.Policies()[0]
			at := time.Date(2006, 10, 28, 0, 0, 0, 0, time.UTC).UnixNano()
			for range 5000 {
				at += rng.Int64N(int64(30*time.Hour)) - int64(10*time.Hour)
				_, end := l.Period(time.Unix(0, at))
				res, _ := p.Decide(0, at, 1)
				require.Equal(t, end.Sub(time.Unix(0, at)), res.ResetAfter, "%v: Decide at %v", l, time.Unix(0, at).In(loc))
			}
		}
	}
}
