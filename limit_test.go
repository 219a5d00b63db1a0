package ratelimit

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones of the Period tests, on any machine

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nopStore allows everything; for tests that only construct limiters.
type nopStore struct{}

func (nopStore) Take(_ context.Context, p *Policy, _ string, _ int64) (Result, error) {
	return Result{Allowed: true, Policy: p}, nil
}

func TestLimitConstructors(t *testing.T) {
	for _, tc := range []struct {
		l        Limit
		interval time.Duration
		burst    int64
		str      string
	}{
		{PerSecond(5), 200 * time.Millisecond, 5, "5/s"},
		{PerSecond(5).WithBurst(10), 200 * time.Millisecond, 10, "5/s burst 10"},
		{PerSecond(3), 333333333, 3, "3/s"},
		{Per(100, time.Minute), 600 * time.Millisecond, 100, "100/min"},
		{Per(9, time.Minute), 6666666667, 9, "9/min"}, // 60 s / 9 rounds up
		{Per(1000, time.Hour), 3600 * time.Millisecond, 1000, "1000/h"},
		{Per(1, 24*time.Hour), 24 * time.Hour, 1, "1/d"},
		{Per(10000, 24*time.Hour), 8640 * time.Millisecond, 10000, "10000/d"},
		{Per(2, 3*time.Second), 1500 * time.Millisecond, 2, "2/3s"},
		{Per(1, 7*time.Second).WithBurst(3), 7 * time.Second, 3, "1/7s burst 3"},
		{Per(1, 1500*time.Millisecond), 1500 * time.Millisecond, 1, "1/1.5s"},
		{Per(3, 2999), 1000, 3, "3/2.999µs"}, // 2999 ns / 3 rounds up, 0.03% off
		{Per(3, 3001), 1000, 3, "3/3.001µs"}, // 3001 ns / 3 rounds down
		{Per(2, 3001), 1501, 2, "2/3.001µs"}, // a half rounds up
		{Per(1, time.Nanosecond).WithBurst(1e15), 1, 1e15, "1/1ns burst 1000000000000000"},
		{Per(1e9, time.Second), 1, 1e9, "1000000000/s"},
		{PerSecond(5).WithBurst(5), 200 * time.Millisecond, 5, "5/s"},
		{Per(1, maxSpan), maxSpan, 1, "1/438000h0m0s"}, // exactly the longest span
	} {
		assert.Equal(t, tc.interval, tc.l.Interval(), "%v.Interval()", tc.l)
		assert.Equal(t, tc.burst, tc.l.Burst(), "%v.Burst()", tc.l)
		assert.Equal(t, tc.str, tc.l.String())
		assert.NoError(t, tc.l.validate(), "%v", tc.l)
	}
}

// An invalid Limit is written as the call that built it, and validate
// (which New reports) names that call and the reason.
func TestLimitInvalid(t *testing.T) {
	for _, tc := range []struct {
		l    Limit
		str  string
		want string
	}{
		{Limit{}, "Limit{}", "the zero Limit"},
		{PerSecond(0), "PerSecond(0)", "the number of tokens must be positive"},
		{PerSecond(-5), "PerSecond(-5)", "the number of tokens must be positive"},
		{Per(-1, time.Minute), "Per(-1, time.Minute)", "the number of tokens must be positive"},
		{Per(0, time.Hour), "Per(0, time.Hour)", "the number of tokens must be positive"},
		{Per(-2, 24*time.Hour), "Per(-2, 24*time.Hour)", "the number of tokens must be positive"},
		{Per(5, -time.Second), "Per(5, -1s)", "the period must be positive"},
		{Per(5, 0), "Per(5, 0s)", "the period must be positive"},
		{Per(1e12, time.Second), "PerSecond(1000000000000)", "faster than one token a nanosecond"},
		{Per(3, 1), "Per(3, 1ns)", "faster than one token a nanosecond"},
		{Per(3, 2), "Per(3, 2ns)", "more than 0.1% off the rate as written"},
		{Per(2e9, time.Second), "PerSecond(2000000000)", "more than 0.1% off the rate as written"},
		{Per(3, 500), "Per(3, 500ns)", "more than 0.1% off the rate as written"},
		{PerSecond(5).WithBurst(0), "PerSecond(5).WithBurst(0)", "the burst must be at least 1"},
		{PerSecond(5).WithBurst(-1), "PerSecond(5).WithBurst(-1)", "the burst must be at least 1"},
		{Per(1, time.Hour).WithBurst(1 << 40), "Per(1, time.Hour).WithBurst(1099511627776)", "more than 50 years"},
		{Per(1, maxSpan+1), "Per(1, 438000h0m0.000000001s)", "more than 50 years"},
		{Per(1, math.MaxInt64), "Per(1, 2562047h47m16.854775807s)", "more than 50 years"},
		{Per(3, math.MaxInt64), "Per(3, 2562047h47m16.854775807s)", "more than 50 years"}, // no overflow
		{Per(1, time.Nanosecond).WithBurst(math.MaxInt64), "Per(1, 1ns).WithBurst(9223372036854775807)", "more than 50 years"},
	} {
		assert.Equal(t, tc.str+" (invalid)", tc.l.String(), "String of an invalid limit")
		err := tc.l.validate()
		if assert.Error(t, err, "%s.validate()", tc.str) {
			assert.True(t, strings.HasPrefix(err.Error(), tc.str+": "), "%s.validate() = %v", tc.str, err)
			assert.Contains(t, err.Error(), tc.want, "%s.validate()", tc.str)
		}
	}
}

// New reports an invalid limit with the call that built it and the
// policy's name.
func TestNewNamesInvalidLimit(t *testing.T) {
	for _, tc := range []struct {
		p    Policy
		want []string
	}{
		{Policy{Limit: PerSecond(-5)}, []string{`policy "default"`, "PerSecond(-5)", "must be positive"}},
		{Policy{Name: "huge", Limit: Per(1e12, time.Second)}, []string{`policy "huge"`, "faster than one token a nanosecond"}},
		{Policy{Name: "zero"}, []string{`policy "zero"`, "Limit{}", "the zero Limit"}},
		{Policy{}, []string{`policy "default"`, "the zero Limit"}},
	} {
		_, err := New(nopStore{}, tc.p)
		if assert.Error(t, err, "New(%+v)", tc.p) {
			for _, want := range tc.want {
				assert.Contains(t, err.Error(), want, "New(%+v)", tc.p)
			}
		}
	}
}

// loadLocation returns the zone name, which time/tzdata holds.
func loadLocation(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err, "LoadLocation(%q)", name)
	return loc
}

// A calendar quota's burst is its quota, its Interval 0, and String says
// the quota, the period and the zone; WithBurst makes it another quota.
func TestQuotaConstructors(t *testing.T) {
	paris := loadLocation(t, "Europe/Paris")
	for _, tc := range []struct {
		l     Limit
		burst int64
		str   string
	}{
		{Daily(2500, time.UTC), 2500, "2500/day (UTC)"},
		{Daily(1, paris), 1, "1/day (Europe/Paris)"},
		{Monthly(100000, paris), 100000, "100000/month (Europe/Paris)"},
		{Daily(10, time.UTC).WithBurst(5), 5, "5/day (UTC)"},
		{Monthly(10, time.UTC).WithBurst(40), 40, "40/month (UTC)"},
		{Daily(maxQuota, time.UTC), maxQuota, "1000000000000/day (UTC)"},
	} {
		assert.NoError(t, tc.l.validate(), "%v", tc.l)
		assert.Equal(t, tc.burst, tc.l.Burst(), "%v.Burst()", tc.l)
		assert.Zero(t, tc.l.Interval(), "%v.Interval()", tc.l)
		assert.Equal(t, tc.str, tc.l.String())
	}
	assert.Equal(t, Daily(5, time.UTC), Daily(10, time.UTC).WithBurst(5), "a quota of 10 made one of 5 is the quota of 5")
	assert.NotEqual(t, Daily(5, time.UTC), Monthly(5, time.UTC))
	assert.NotEqual(t, Daily(5, time.UTC), Daily(5, paris))
}

// An invalid quota is written as the call that built it, and validate
// names that call, the value at fault and what is wanted.
func TestQuotaInvalid(t *testing.T) {
	for _, tc := range []struct {
		l    Limit
		str  string
		want string
	}{
		{Daily(10, nil), "Daily(10, nil)", "a nil *time.Location; use time.UTC or time.LoadLocation"},
		{Monthly(10, nil), "Monthly(10, nil)", "a nil *time.Location"},
		{Daily(0, nil), "Daily(0, nil)", "a nil *time.Location"}, // the first fault
		{Daily(0, time.UTC), `Daily(0, "UTC")`, "the quota must be from 1 to 1000000000000"},
		{Daily(-1, time.UTC), `Daily(-1, "UTC")`, "the quota must be from 1 to 1000000000000"},
		{Monthly(maxQuota+1, time.UTC), `Monthly(1000000000001, "UTC")`, "the quota must be from 1 to 1000000000000"},
		{Daily(math.MaxInt64, time.UTC), `Daily(9223372036854775807, "UTC")`, "the quota must be from 1 to 1000000000000"},
		{Daily(10, time.UTC).WithBurst(0), `Daily(0, "UTC")`, "the quota must be from 1 to 1000000000000"},
		{Monthly(10, time.UTC).WithBurst(-3), `Monthly(-3, "UTC")`, "the quota must be from 1 to 1000000000000"},
	} {
		assert.Equal(t, tc.str+" (invalid)", tc.l.String(), "String of an invalid quota")
		err := tc.l.validate()
		if assert.Error(t, err, "%s.validate()", tc.str) {
			assert.True(t, strings.HasPrefix(err.Error(), tc.str+": "), "%s.validate() = %v", tc.str, err)
			assert.Contains(t, err.Error(), tc.want, "%s.validate()", tc.str)
		}
	}
}

// periodCase is a calendar period to check: the one that holds at, in
// RFC 3339, from start to end, which lasts length.
type periodCase struct {
	zone       string
	month      bool // a Monthly quota, else a Daily one
	at         string
	start, end string
	length     time.Duration
}

// checkPeriods checks that Period gives each case's period, for at, for
// its first and last instants, and that the periods before and after it
// meet it: no instant is in two periods, none in none.
func checkPeriods(t *testing.T, cases []periodCase) {
	t.Helper()
	parse := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return v
	}
	for _, tc := range cases {
		l := Daily(1, loadLocation(t, tc.zone))
		if tc.month {
			l = Monthly(1, l.loc)
		}
		at, start, end := parse(tc.at), parse(tc.start), parse(tc.end)
		for _, in := range []time.Time{at, start, end.Add(-1)} {
			gotStart, gotEnd := l.Period(in)
			assert.True(t, start.Equal(gotStart) && end.Equal(gotEnd), "%v.Period(%v) = %v, %v, want %v, %v", l, in, gotStart, gotEnd, start, end)
		}
		assert.Equal(t, tc.length, end.Sub(start), "%v: the period of %s", l, tc.at)
		if _, before := l.Period(start.Add(-1)); !before.Equal(start) {
			t.Errorf("%v.Period(%v): the period before ends at %v, want %v", l, start.Add(-1), before, start)
		}
		if after, _ := l.Period(end); !after.Equal(end) {
			t.Errorf("%v.Period(%v): the period after starts at %v, want %v", l, end, after, end)
		}
		assert.Equal(t, end.UnixNano(), l.periodEnd(at.UnixNano()), "%v.periodEnd(%s)", l, tc.at)
	}
}

const day24 = 24 * time.Hour

// Period gives the calendar day or month that holds t in the quota's zone,
// of 23 or 25 hours on a daylight-saving change, and the month of its own
// length; a rate has no period.
func TestLimitPeriod(t *testing.T) {
	checkPeriods(t, []periodCase{
		{"UTC", false, "2026-03-15T12:34:56Z", "2026-03-15T00:00:00Z", "2026-03-16T00:00:00Z", day24},
		{"UTC", false, "2026-12-31T23:59:59.999999999Z", "2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z", day24},
		{"UTC", false, "2026-03-15T00:00:00+09:00", "2026-03-14T00:00:00Z", "2026-03-15T00:00:00Z", day24}, // the zone of t does not matter
		{"UTC", true, "2026-02-10T08:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", 28 * day24},
		{"UTC", true, "2028-02-29T23:00:00Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z", 29 * day24},
		{"UTC", true, "2026-04-30T12:00:00Z", "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z", 30 * day24},
		{"UTC", true, "2026-12-01T00:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z", 31 * day24},

		// Europe/Paris in 2026: 02:00 becomes 03:00 on 29 March, 03:00
		// becomes 02:00 on 25 October.
		{"Europe/Paris", false, "2026-03-28T23:30:00+01:00", "2026-03-28T00:00:00+01:00", "2026-03-29T00:00:00+01:00", day24},
		{"Europe/Paris", false, "2026-03-29T12:00:00+02:00", "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 23 * time.Hour},
		{"Europe/Paris", false, "2026-10-25T02:30:00+02:00", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 25 * time.Hour},
		{"Europe/Paris", false, "2026-10-25T02:30:00+01:00", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 25 * time.Hour},
		{"Europe/Paris", false, "2026-10-26T00:00:00+01:00", "2026-10-26T00:00:00+01:00", "2026-10-27T00:00:00+01:00", day24},
		{"Europe/Paris", true, "2026-03-31T23:59:59+02:00", "2026-03-01T00:00:00+01:00", "2026-04-01T00:00:00+02:00", 31*day24 - time.Hour},
		{"Europe/Paris", true, "2026-10-01T00:00:00+02:00", "2026-10-01T00:00:00+02:00", "2026-11-01T00:00:00+01:00", 31*day24 + time.Hour},
		{"Europe/Paris", true, "2026-02-28T23:00:00Z", "2026-03-01T00:00:00+01:00", "2026-04-01T00:00:00+02:00", 31*day24 - time.Hour},

		// America/New_York in 2026: 8 March and 1 November, at 02:00.
		{"America/New_York", false, "2026-03-08T03:00:00-04:00", "2026-03-08T00:00:00-05:00", "2026-03-09T00:00:00-04:00", 23 * time.Hour},
		{"America/New_York", false, "2026-11-01T01:30:00-05:00", "2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00", 25 * time.Hour},
		{"America/New_York", false, "2026-07-04T03:59:59Z", "2026-07-03T00:00:00-04:00", "2026-07-04T00:00:00-04:00", day24},
		{"America/New_York", true, "2026-11-15T12:00:00-05:00", "2026-11-01T00:00:00-04:00", "2026-12-01T00:00:00-05:00", 30*day24 + time.Hour},

		// Asia/Kolkata, +05:30 all year: a day begins at 18:30 UTC.
		{"Asia/Kolkata", false, "2026-06-10T18:29:59Z", "2026-06-10T00:00:00+05:30", "2026-06-11T00:00:00+05:30", day24},
		{"Asia/Kolkata", false, "2026-06-10T18:30:00Z", "2026-06-11T00:00:00+05:30", "2026-06-12T00:00:00+05:30", day24},
		{"Asia/Kolkata", true, "2026-06-30T18:30:00Z", "2026-07-01T00:00:00+05:30", "2026-08-01T00:00:00+05:30", 31 * day24},

		// Asia/Beirut in 2026: midnight of 29 March is in the gap (00:00
		// becomes 01:00): the day begins at the first instant after it.
		{"Asia/Beirut", false, "2026-03-28T23:59:59+02:00", "2026-03-28T00:00:00+02:00", "2026-03-29T01:00:00+03:00", day24},
		{"Asia/Beirut", false, "2026-03-29T01:00:00+03:00", "2026-03-29T01:00:00+03:00", "2026-03-30T00:00:00+03:00", 23 * time.Hour},
		{"Asia/Beirut", false, "2026-03-29T12:00:00+03:00", "2026-03-29T01:00:00+03:00", "2026-03-30T00:00:00+03:00", 23 * time.Hour},

		// West of Greenwich too, where time.Date puts a midnight in a gap
		// on the day before: America/Havana in 2026, 00:00 becomes 01:00 on
		// 8 March, and 01:00 becomes 00:00 on 1 November (midnight twice:
		// the day begins at the first); America/Santiago, 00:00 becomes
		// 01:00 on 6 September, and 5 April begins at 00:00 after an hour
		// of 4 April repeats.
		{"America/Havana", false, "2026-03-07T23:30:00-05:00", "2026-03-07T00:00:00-05:00", "2026-03-08T01:00:00-04:00", day24},
		{"America/Havana", false, "2026-03-08T12:00:00-04:00", "2026-03-08T01:00:00-04:00", "2026-03-09T00:00:00-04:00", 23 * time.Hour},
		{"America/Havana", true, "2026-03-08T01:00:00-04:00", "2026-03-01T00:00:00-05:00", "2026-04-01T00:00:00-04:00", 31*day24 - time.Hour},
		{"America/Havana", false, "2026-11-01T00:30:00-05:00", "2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00", 25 * time.Hour},
		{"America/Santiago", false, "2026-09-05T23:59:59-04:00", "2026-09-05T00:00:00-04:00", "2026-09-06T01:00:00-03:00", day24},
		{"America/Santiago", false, "2026-09-06T01:00:00-03:00", "2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00", 23 * time.Hour},
		{"America/Santiago", false, "2026-04-04T23:30:00-04:00", "2026-04-04T00:00:00-03:00", "2026-04-05T00:00:00-04:00", 25 * time.Hour},
	})
	start, end := PerSecond(5).Period(time.Now())
	assert.True(t, start.IsZero() && end.IsZero(), "a rate's Period = %v, %v, want zero Times", start, end)
}

// The changes of clock that TestLimitPeriod counts on are in the zone
// data: at the instant of each, the local time jumps as it says.
func TestLimitPeriodZones(t *testing.T) {
	for _, tc := range []struct {
		zone       string
		before, at string // one nanosecond before the change, and the change, in local time
		wantBefore string
		wantAt     string
	}{
		{"Europe/Paris", "2026-03-29T00:59:59.999999999Z", "2026-03-29T01:00:00Z", "01:59:59", "03:00:00"},
		{"Europe/Paris", "2026-10-25T00:59:59.999999999Z", "2026-10-25T01:00:00Z", "02:59:59", "02:00:00"},
		{"Asia/Beirut", "2026-03-28T21:59:59.999999999Z", "2026-03-28T22:00:00Z", "23:59:59", "01:00:00"},
		{"America/Havana", "2026-03-08T04:59:59.999999999Z", "2026-03-08T05:00:00Z", "23:59:59", "01:00:00"},
		{"America/Santiago", "2026-09-06T03:59:59.999999999Z", "2026-09-06T04:00:00Z", "23:59:59", "01:00:00"},
	} {
		loc := loadLocation(t, tc.zone)
		for _, c := range [][2]string{{tc.before, tc.wantBefore}, {tc.at, tc.wantAt}} {
			v, err := time.Parse(time.RFC3339Nano, c[0])
			require.NoError(t, err)
			assert.Equal(t, c[1], v.In(loc).Format("15:04:05"), "%s at %s", tc.zone, c[0])
		}
	}
}

// A day whose midnight falls in a daylight-saving gap starts at the end of
// the gap, and the day before lasts until then: every instant is in the
// period Period gives, and the periods follow one another.
func TestPeriodAcrossMidnightGaps(t *testing.T) {
	for _, zone := range []string{"America/Havana", "America/Santiago", "Asia/Beirut", "Europe/Paris"} {
		loc, err := time.LoadLocation(zone)
		if !assert.NoError(t, err) {
			continue
		}
		l := Daily(1, loc)
		var short, long int
		_, prevEnd := l.Period(time.Date(2025, 12, 31, 12, 0, 0, 0, loc))
		for at := time.Date(2026, 1, 1, 0, 30, 0, 0, loc); at.Year() < 2027; at = at.Add(time.Hour) {
			start, end := l.Period(at)
			if !assert.True(t, !at.Before(start) && at.Before(end), "%s: %v outside [%v, %v)", zone, at, start, end) {
				break
			}
			if start.Equal(prevEnd) {
				switch end.Sub(start) {
				case 23 * time.Hour:
					short++
				case 25 * time.Hour:
					long++
				default:
					assert.Equal(t, 24*time.Hour, end.Sub(start), "%s: the day from %v", zone, start)
				}
			} else {
				assert.Equal(t, prevEnd, end, "%s: the period of %v follows the one before", zone, at)
			}
			prevEnd = end
		}
		assert.Equal(t, [2]int{1, 1}, [2]int{short, long}, "%s: the days of 23 h and 25 h in 2026", zone)
	}
	havana, _ := time.LoadLocation("America/Havana")
	start, end := Daily(1, havana).Period(time.Date(2026, 3, 8, 4, 30, 0, 0, time.UTC)) // 23:30 on the 7th
	assert.Equal(t, time.Date(2026, 3, 8, 5, 0, 0, 0, time.UTC), end.UTC(), "the 7th lasts until the gap: 01:00 CDT on the 8th")
	assert.Equal(t, 24*time.Hour, end.Sub(start))
}
