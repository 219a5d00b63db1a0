package main

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit/storetest"
)

// setClock moves clock to t.
func setClock(clock *storetest.Clock, t time.Time) { clock.Advance(t.Sub(clock.Now())) }

// inZone returns the time.Location of name, which must exist.
func inZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// TestDailyQuota: -daily 3 admits three requests a calendar day in -tz;
// the fourth is refused by the "daily" policy with Retry-After the seconds
// to midnight there, still one nanosecond before it, and midnight admits
// again.
func TestDailyQuota(t *testing.T) {
	for _, tz := range []string{"UTC", "America/New_York", "Asia/Kolkata"} {
		t.Run(tz, func(t *testing.T) {
			loc := inZone(t, tz)
			h, clock := newTestHandler(t, "-daily", "3", "-tz", tz)
			setClock(clock, time.Date(2026, 1, 10, 20, 30, 0, 0, loc))
			req := request{target: "/geocode?q=paris", apiKey: "alice"}
			require.Equal(t, []int{200, 200, 200}, statuses(h, req, 3))

			w := serve(h, req)
			require.Equal(t, http.StatusTooManyRequests, w.Code)
			const toMidnight = 3*3600 + 30*60
			assert.Equal(t, strconv.Itoa(toMidnight), w.Header().Get("Retry-After"))
			assert.Equal(t, `"daily";r=0;t=`+strconv.Itoa(toMidnight), field(w.Header(), "RateLimit"))
			assert.Equal(t, `"default";q=10;w=2,"daily";q=3;w=86400`, field(w.Header(), "RateLimit-Policy"))
			assert.Equal(t, []any{"daily"}, decode(t, w)["violated-policies"])

			midnight := time.Date(2026, 1, 11, 0, 0, 0, 0, loc)
			setClock(clock, midnight.Add(-time.Nanosecond))
			w = serve(h, req)
			assert.Equal(t, http.StatusTooManyRequests, w.Code, "a nanosecond before midnight")
			assert.Equal(t, "1", w.Header().Get("Retry-After"))

			setClock(clock, midnight)
			assert.Equal(t, []int{200, 200, 200, 429}, statuses(h, req, 4), "from midnight")
			assert.Equal(t, http.StatusOK, serve(h, request{target: "/geocode?q=paris", apiKey: "bob"}).Code, "another key")
		})
	}
}

// TestMonthlyQuota: -monthly 2 resets at 00:00 on the 1st in -tz.
func TestMonthlyQuota(t *testing.T) {
	loc := inZone(t, "Asia/Tokyo")
	h, clock := newTestHandler(t, "-monthly", "2", "-tz", "Asia/Tokyo")
	start := time.Date(2026, 2, 3, 9, 0, 0, 0, loc)
	setClock(clock, start)
	req := request{target: "/geocode?q=tokyo", apiKey: "alice"}
	require.Equal(t, []int{200, 200}, statuses(h, req, 2))

	first := time.Date(2026, 3, 1, 0, 0, 0, 0, loc)
	w := serve(h, req)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, strconv.Itoa(int(first.Sub(start)/time.Second)), w.Header().Get("Retry-After"))
	assert.Equal(t, []any{"monthly"}, decode(t, w)["violated-policies"])
	assert.Equal(t, `"default";q=10;w=2,"monthly";q=2;w=2419200`, field(w.Header(), "RateLimit-Policy"), "28 days")

	setClock(clock, first.Add(-time.Nanosecond))
	assert.Equal(t, http.StatusTooManyRequests, serve(h, req).Code, "a nanosecond before the 1st")
	setClock(clock, first)
	w = serve(h, req)
	assert.Equal(t, http.StatusOK, w.Code, "from the 1st")
	assert.Equal(t, `"default";q=10;w=2,"monthly";q=2;w=2678400`, field(w.Header(), "RateLimit-Policy"), "31 days")
	assert.Equal(t, []int{200, 429}, statuses(h, req, 2))
}

// TestQuotaDaylightSaving: in Europe/Paris the day of 29 March 2026 lasts
// 23 hours and that of 25 October 25 hours, as RateLimit-Policy's w says;
// a quota spent at 00:00 comes back at the next midnight.
func TestQuotaDaylightSaving(t *testing.T) {
	loc := inZone(t, "Europe/Paris")
	for _, tc := range []struct {
		day   time.Time
		hours int
	}{
		{time.Date(2026, 3, 29, 0, 0, 0, 0, loc), 23},
		{time.Date(2026, 10, 25, 0, 0, 0, 0, loc), 25},
		{time.Date(2026, 10, 26, 0, 0, 0, 0, loc), 24},
	} {
		t.Run(tc.day.Format(time.DateOnly), func(t *testing.T) {
			h, clock := newTestHandler(t, "-daily", "1", "-tz", "Europe/Paris")
			setClock(clock, tc.day)
			req := request{target: "/geocode?q=paris", apiKey: "alice"}
			w := serve(h, req)
			require.Equal(t, http.StatusOK, w.Code)
			day := strconv.Itoa(tc.hours * 3600)
			assert.Equal(t, `"default";q=10;w=2,"daily";q=1;w=`+day, field(w.Header(), "RateLimit-Policy"))
			w = serve(h, req)
			require.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, day, w.Header().Get("Retry-After"))
			assert.Equal(t, `"daily";r=0;t=`+day, field(w.Header(), "RateLimit"))
			setClock(clock, tc.day.Add(time.Duration(tc.hours)*time.Hour))
			assert.Equal(t, http.StatusOK, serve(h, req).Code, "at the next midnight")
		})
	}
}

// TestQuotaWithRate: a request that the rate refuses spends nothing from
// the daily quota, and the quota's refusal names it alone.
func TestQuotaWithRate(t *testing.T) {
	h, clock := newTestHandler(t, "-rate", "1", "-burst", "2", "-daily", "3")
	req := request{target: "/geocode?q=paris", apiKey: "alice"}
	w := serve(h, req)
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"default";r=1;t=1`, field(w.Header(), "RateLimit"))
	require.Equal(t, []int{200, 429, 429}, statuses(h, req, 3))

	clock.Advance(2 * time.Second)
	assert.Equal(t, http.StatusOK, serve(h, req).Code, "the third of the day: the refusals spent none")
	w = serve(h, req)
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, []any{"daily"}, decode(t, w)["violated-policies"])
}
