package storetest

import (
	"context"
	"testing"
	"time"
	_ "time/tzdata" // the zones of the daylight-saving tests, on any machine

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/refusers"
)

// RunQuotas runs the suite's tests of calendar quotas alone (Run runs them
// too), for a store configured so that the suite's other tests do not
// hold, such as a Redis store that leases tokens (a quota's never are).
func RunQuotas(t *testing.T, newStore NewStore) {
	t.Helper()
	runTests(t, newStore, quotaTests)
}

var quotaTests = []test{
	{"Quota", testQuota},
	{"QuotaResetInstant", testQuotaResetInstant},
	{"QuotaDaylightSaving", testQuotaDaylightSaving},
	{"QuotaMonth", testQuotaMonth},
	{"QuotaGiveBack", testQuotaGiveBack},
	{"QuotaReset", testQuotaReset},
	{"QuotaDebt", testQuotaDebt},
	{"QuotaChangedLimit", testQuotaChangedLimit},
}

// moveTo sets c to t.
func moveTo(c *Clock, t time.Time) { c.Advance(t.Sub(c.Now())) }

// zone returns the time zone name.
func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// testQuota: a daily quota of 5 decided at 10:00 UTC: every result says
// 14 hours to the reset, whatever was spent; a refusal waits for it, and
// spends nothing; keys are independent.
func testQuota(t *testing.T, c *Clock, s ratelimit.Store) {
	c.Advance(10 * time.Hour)
	run(t, c, s, policy("daily", ratelimit.Daily(5, time.UTC)), []step{
		{cost: 0, want: allowed(5, 14*time.Hour)},
		{cost: 1, want: allowed(4, 14*time.Hour)},
		{cost: 0, want: allowed(4, 14*time.Hour)},
		{cost: 3, want: allowed(1, 14*time.Hour)},
		{cost: 2, want: refused(1, 14*time.Hour, 14*time.Hour)},
		{cost: 1, want: allowed(0, 14*time.Hour)},
		{advance: time.Hour, cost: 1, want: refused(0, 13*time.Hour, 13*time.Hour)},
		{cost: 0, want: allowed(0, 13*time.Hour)},
		{key: "other", cost: 5, want: allowed(0, 13*time.Hour)},
		{advance: 13*time.Hour - 1, cost: 1, want: refused(0, 1, 1)},
	})
}

// testQuotaResetInstant: a quota spent is refused a nanosecond before
// midnight in its zone (Europe/Paris: 23:00 UTC in January), and full again
// at midnight, for a day of 24 hours.
func testQuotaResetInstant(t *testing.T, c *Clock, s ratelimit.Store) {
	run(t, c, s, policy("daily", ratelimit.Daily(3, zone(t, "Europe/Paris"))), []step{
		{cost: 3, want: allowed(0, 23*time.Hour)}, // 01:00 in Paris
		{advance: 23*time.Hour - 1, cost: 1, want: refused(0, 1, 1)},
		{cost: 0, want: allowed(0, 1)},
		{advance: 1, cost: 1, want: allowed(2, 24*time.Hour)},
		{cost: 2, want: allowed(0, 24*time.Hour)},
		{cost: 1, want: refused(0, 24*time.Hour, 24*time.Hour)},
	})
}

// testQuotaDaylightSaving: the days of the clock changes are 23 and 25
// hours long, and each resets at its midnight to the nanosecond: in
// Europe/Paris (the changes at 02:00 and 03:00), and in America/Havana,
// whose spring change skips midnight itself (00:00 → 01:00), so that 7
// March 2026 ends at 01:00 on the 8th, and the 8th is 23 hours long.
func testQuotaDaylightSaving(t *testing.T, c *Clock, s ratelimit.Store) {
	loc := zone(t, "Europe/Paris")
	paris := policy("paris", ratelimit.Daily(2, loc))
	moveTo(c, time.Date(2026, 3, 29, 0, 0, 0, 0, loc))
	run(t, c, s, paris, []step{
		{cost: 2, want: allowed(0, 23*time.Hour)},
		{advance: 23*time.Hour - 1, cost: 1, want: refused(0, 1, 1)},
		{advance: 1, cost: 1, want: allowed(1, 24*time.Hour)},
	})
	moveTo(c, time.Date(2026, 10, 25, 0, 0, 0, 0, loc))
	run(t, c, s, paris, []step{
		{cost: 2, want: allowed(0, 25*time.Hour)},
		{advance: 2 * time.Hour, cost: 1, want: refused(0, 23*time.Hour, 23*time.Hour)}, // 02:00 CEST, and 02:00 CET comes an hour later
		{advance: 23*time.Hour - 1, cost: 1, want: refused(0, 1, 1)},
		{advance: 1, cost: 1, want: allowed(1, 24*time.Hour)},
	})

	loc = zone(t, "America/Havana")
	moveTo(c, time.Date(2026, 3, 7, 12, 0, 0, 0, loc))
	run(t, c, s, policy("havana", ratelimit.Daily(2, loc)), []step{
		{cost: 2, want: allowed(0, 12*time.Hour)},
		{advance: 11 * time.Hour, cost: 1, want: refused(0, time.Hour, time.Hour)}, // 23:00, the day's last hour
		{advance: time.Hour - 1, cost: 1, want: refused(0, 1, 1)},
		{advance: 1, cost: 1, want: allowed(1, 23*time.Hour)}, // 01:00 on the 8th
	})
}

// testQuotaMonth: a monthly quota resets at 00:00 on the 1st: February's
// spent is refused until then, to the nanosecond, and March is 31 days
// long in UTC, an hour less in Paris.
func testQuotaMonth(t *testing.T, c *Clock, s ratelimit.Store) {
	moveTo(c, time.Date(2026, 2, 10, 0, 0, 0, 0, time.UTC))
	const day = 24 * time.Hour
	run(t, c, s, policy("monthly", ratelimit.Monthly(10, time.UTC)), []step{
		{cost: 10, want: allowed(0, 19*day)},
		{advance: 19*day - 1, cost: 1, want: refused(0, 1, 1)},
		{advance: 1, cost: 1, want: allowed(9, 31*day)},
	})
	paris := zone(t, "Europe/Paris")
	moveTo(c, time.Date(2026, 3, 1, 0, 0, 0, 0, paris))
	run(t, c, s, policy("paris", ratelimit.Monthly(10, paris)), []step{
		{cost: 4, want: allowed(6, 31*day-time.Hour)},
		{advance: 31*day - time.Hour - 1, cost: 7, want: refused(6, 1, 1)},
		{advance: 1, cost: 7, want: allowed(3, 30*day)},
	})
}

// testQuotaGiveBack: within the period a give-back returns its take's
// whole cost, however late (a quota earns nothing back before its reset);
// across the reset it returns nothing, nor after a Reset.
func testQuotaGiveBack(t *testing.T, c *Clock, s ratelimit.Store) {
	rs, ok := s.(ratelimit.RefundStore)
	if !ok {
		t.Skipf("%T is not a ratelimit.RefundStore", s)
	}
	p := policy("daily", ratelimit.Daily(5, time.UTC))
	refund := func(key string, cost int64, took ratelimit.Result) {
		t.Helper()
		require.NoError(t, rs.Refund(context.Background(), p, key, cost, took), "Refund(%q, %d)", key, cost)
	}
	c.Advance(10 * time.Hour)
	three := take(t, s, p, "k", 3)
	two := take(t, s, p, "k", 2)
	c.Advance(time.Hour)
	refund("k", 3, three)
	run(t, c, s, p, []step{{cost: 0, want: allowed(3, 13*time.Hour)}})
	refund("k", 1, two)
	run(t, c, s, p, []step{{cost: 0, want: allowed(4, 13*time.Hour)}})

	c.Advance(12*time.Hour + 59*time.Minute) // a minute to the reset
	five := take(t, s, p, "late", 5)
	require.True(t, five.Allowed)
	c.Advance(time.Minute)
	run(t, c, s, p, []step{{key: "late", cost: 5, want: allowed(0, 24*time.Hour)}})
	refund("late", 5, five)
	run(t, c, s, p, []step{{key: "late", cost: 1, want: refused(0, 24*time.Hour, 24*time.Hour)}})

	if rst, ok := s.(ratelimit.ResetStore); ok {
		took := take(t, s, p, "r", 4)
		reset(t, rst, p, "r")
		run(t, c, s, p, []step{{key: "r", cost: 5, want: allowed(0, 24*time.Hour)}})
		refund("r", 4, took)
		run(t, c, s, p, []step{{key: "r", cost: 1, want: refused(0, 24*time.Hour, 24*time.Hour)}})
	}
}

// testQuotaReset: Reset gives a key its whole quota back at once, and only
// that key.
func testQuotaReset(t *testing.T, c *Clock, s ratelimit.Store) {
	rs := resetStore(t, s)
	p := policy("daily", ratelimit.Daily(5, time.UTC))
	c.Advance(20 * time.Hour)
	take(t, s, p, "k", 5)
	take(t, s, p, "other", 2)
	require.False(t, take(t, s, p, "k", 1).Allowed)
	reset(t, rs, p, "k")
	run(t, c, s, p, []step{
		{cost: 0, want: allowed(5, 4*time.Hour)},
		{cost: 5, want: allowed(0, 4*time.Hour)},
		{key: "other", cost: 0, want: allowed(3, 4*time.Hour)},
		{advance: 4 * time.Hour, cost: 5, want: allowed(0, 24*time.Hour)},
	})
}

// testQuotaWithRate: 5/s burst 10 and 15 a day in one decision: the rate
// binds first, then the day; a request the day refuses spends nothing of
// the rate, and waits until midnight; at midnight the day is whole again.
func testQuotaWithRate(t *testing.T, c *Clock, s ratelimit.Store) {
	l := limiter(t, s, ratelimit.Policy{Name: "rate", Limit: fivePerSecond},
		ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(15, time.UTC)})
	const key = "{client}" // one Redis Cluster slot for both
	c.Advance(10 * time.Hour)
	for range 10 {
		require.True(t, limit(t, l, key, 1).Allowed)
	}
	res := limit(t, l, key, 1)
	assert.Equal(t, []string{"rate"}, refusers.Names(res, false))
	c.Advance(time.Second)
	for range 5 {
		require.True(t, limit(t, l, key, 1).Allowed)
	}
	c.Advance(time.Second)
	res = limit(t, l, key, 1)
	assert.False(t, res.Allowed)
	assert.Equal(t, []string{"daily"}, refusers.Names(res, false))
	assert.Equal(t, 14*time.Hour-2*time.Second, res.RetryAfter, "until midnight")
	look := limit(t, l, key, 0)
	require.Len(t, look.Results, 2)
	assert.Equal(t, int64(5), look.Results[0].Remaining, "the rate's tokens, untouched by the refusal")
	assert.Equal(t, int64(0), look.Results[1].Remaining)
	c.Advance(14*time.Hour - 2*time.Second)
	res = limit(t, l, key, 1)
	require.True(t, res.Allowed)
	assert.Equal(t, int64(14), res.Results[1].Remaining)
	assert.Equal(t, 24*time.Hour, res.Results[1].ResetAfter)
}
