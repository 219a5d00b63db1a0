package ratelimit

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
