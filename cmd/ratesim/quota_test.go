package main

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

// quotaRow is what a step of a quota's replay checks: time, key, allowed,
// remaining, retry_after and reset_after, as the CSV writes them.
type quotaRow struct{ time, key, allowed, remaining, retryAfter, resetAfter string }

// checkQuota replays trace with args as CSV and checks every row.
func checkQuota(t *testing.T, trace string, want []quotaRow, args ...string) {
	t.Helper()
	stdout, stderr, code := runCLI(t, trace, append(args, "-format", "csv")...)
	require.Equal(t, 0, code, stderr)
	rows := parseCSV(t, stdout)
	require.Len(t, rows, len(want), "ratesim %q", args)
	for i, r := range rows {
		got := quotaRow{r["time"], r["key"], r["allowed"], r["remaining"], r["retry_after"], r["reset_after"]}
		assert.Equal(t, want[i], got, "ratesim %q: row %d", args, i+1)
		assert.Equal(t, "0", r["delay"], "ratesim %q: row %d: delay", args, i+1)
	}
}

// A daily quota is refused until midnight and whole again exactly at it.
func TestQuotaMidnight(t *testing.T) {
	trace := "0\n0\n0\n1.999999999\n2\n2\n2\n"
	checkQuota(t, trace, []quotaRow{
		{"0", "default", "true", "1", "0", "2"},
		{"0", "default", "true", "0", "0", "2"},
		{"0", "default", "false", "0", "2", "2"},
		{"1.999999999", "default", "false", "0", "0.000000001", "0.000000001"},
		{"2", "default", "true", "1", "0", "86400"}, // 2026-03-28T00:00:00, the reset
		{"2", "default", "true", "0", "0", "86400"},
		{"2", "default", "false", "0", "86400", "86400"},
	}, "-algorithm", "daily", "-burst", "2", "-t0", "2026-03-27T23:59:58")
}

// In Europe/Paris the day the clocks go forward lasts 23 hours and the day
// they go back 25: the reset after it comes that much later.
func TestQuotaDaylightSaving(t *testing.T) {
	spring := "0\n1\n86400\n169199.999999999\n169200\n" // from 2026-03-28 00:00 CET
	checkQuota(t, spring, []quotaRow{
		{"0", "default", "true", "0", "0", "86400"},
		{"1", "default", "false", "0", "86399", "86399"},
		{"86400", "default", "true", "0", "0", "82800"}, // 2026-03-29 00:00 CET, 23 h to go
		{"169199.999999999", "default", "false", "0", "0.000000001", "0.000000001"},
		{"169200", "default", "true", "0", "0", "86400"}, // 2026-03-30 00:00 CEST
	}, "-algorithm", "daily", "-burst", "1", "-tz", "Europe/Paris", "-t0", "2026-03-28")

	autumn := "0\n86400\n176399.999999999\n176400\n" // from 2026-10-24 00:00 CEST
	checkQuota(t, autumn, []quotaRow{
		{"0", "default", "true", "0", "0", "86400"},
		{"86400", "default", "true", "0", "0", "90000"}, // 2026-10-25 00:00 CEST, 25 h to go
		{"176399.999999999", "default", "false", "0", "0.000000001", "0.000000001"},
		{"176400", "default", "true", "0", "0", "86400"}, // 2026-10-26 00:00 CET
	}, "-algorithm", "daily", "-burst", "1", "-tz", "Europe/Paris", "-t0", "2026-10-24")

	// A time 0 with its offset is that instant: the second 02:30 of
	// 2026-10-25, 21 h 30 min before midnight.
	checkQuota(t, "0\n", []quotaRow{{"0", "default", "true", "0", "0", "77400"}},
		"-algorithm", "daily", "-burst", "1", "-tz", "Europe/Paris", "-t0", "2026-10-25T02:30:00+01:00")
}

// A monthly quota resets at 00:00 on the 1st; March in Europe/Paris is an
// hour short of 31 days.
func TestQuotaMonthly(t *testing.T) {
	trace := "0\n0\n86399.999999999\n86400\n86400\n2761199.999999999\n2761200\n"
	checkQuota(t, trace, []quotaRow{
		{"0", "default", "true", "1", "0", "86400"},
		{"0", "default", "true", "0", "0", "86400"},
		{"86399.999999999", "default", "false", "0", "0.000000001", "0.000000001"},
		{"86400", "default", "true", "1", "0", "2674800"}, // 2026-03-01 00:00 CET
		{"86400", "default", "true", "0", "0", "2674800"},
		{"2761199.999999999", "default", "false", "0", "0.000000001", "0.000000001"},
		{"2761200", "default", "true", "1", "0", "2592000"}, // 2026-04-01 00:00 CEST, 30 days to go
	}, "-algorithm", "monthly", "-burst", "2", "-tz", "Europe/Paris", "-t0", "2026-02-28")
}

// With -start empty a quota is used up at time 0, also for keys first seen
// later that day, and whole at the next reset; a cost above it never passes.
func TestQuotaStartEmpty(t *testing.T) {
	trace := "0 a\n43199.5 b\n43200 a\n43200 c\n43200 a 3\n43200 a 2\n"
	checkQuota(t, trace, []quotaRow{
		{"0", "a", "false", "0", "43200", "43200"},
		{"43199.5", "b", "false", "0", "0.5", "0.5"},
		{"43200", "a", "true", "1", "0", "86400"}, // 2026-03-29 00:00 UTC
		{"43200", "c", "true", "1", "0", "86400"},
		{"43200", "a", "false", "1", "0", "86400"}, // 3 > 2: never
		{"43200", "a", "false", "1", "86400", "86400"},
	}, "-algorithm", "daily", "-burst", "2", "-start", "empty", "-t0", "2026-03-28T12:00:00")

	stdout, _, _ := runCLI(t, "0 k 3\n", "-algorithm", "monthly", "-burst", "2")
	assert.Contains(t, stdout, "DENIED       3          2        never")
}

// Replaying an access log, a quota's time 0 is its first line's timestamp.
func TestQuotaAccessLog(t *testing.T) {
	log := `192.0.2.1 - - [28/Mar/2026:23:59:59 +0100] "GET / HTTP/1.1" 200 1
192.0.2.1 - - [29/Mar/2026:00:00:00 +0100] "GET / HTTP/1.1" 200 1
192.0.2.1 - - [29/Mar/2026:01:00:00 +0000] "GET / HTTP/1.1" 200 1
`
	checkQuota(t, log, []quotaRow{
		{"0", "192.0.2.1", "true", "0", "0", "1"},
		{"1", "192.0.2.1", "true", "0", "0", "82800"},         // midnight in Paris
		{"7201", "192.0.2.1", "false", "0", "75600", "75600"}, // 03:00 in Paris
	}, "-log", "common", "-algorithm", "daily", "-burst", "1", "-tz", "Europe/Paris")

	_, stderr, code := runCLI(t, "x\n"+strings.Replace(log, "2026", "2250", 1), "-log", "common", "-algorithm", "daily", "-skip-bad")
	assert.Equal(t, 2, code)
	assert.Equal(t, "ratesim: line 2: timestamp \"28/Mar/2250:23:59:59 +0100\": a calendar quota replays times from 1900-01-01 to 2200-01-01 (UTC)\n", stderr)
}

func TestQuotaFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-algorithm", "daily", "-rate", "5"}, "-rate with -algorithm daily: a quota earns no tokens by the second; -burst is its size"},
		{[]string{"-algorithm", "monthly", "-burst", "1000000000001"}, "-burst 1000000000001: ratelimit: policy \"default\": Monthly(1000000000001, \"UTC\"): the quota must be from 1 to 1000000000000"},
		{[]string{"-algorithm", "daily", "-burst", "0"}, "-burst 0: want a capacity of at least 1"},
		{[]string{"-algorithm", "daily", "-tz", "Mars/Olympus"}, `-tz "Mars/Olympus": unknown time zone; want an IANA name such as Europe/Paris`},
		{[]string{"-tz", "Europe/Pari"}, `-tz "Europe/Pari": unknown time zone`},
		{[]string{"-algorithm", "daily", "-tz", "../etc/passwd"}, `-tz "../etc/passwd": unknown time zone`},
		{[]string{"-tz", "Europe/Paris"}, "-t0 and -tz need -algorithm daily or monthly: a rate has no calendar"},
		{[]string{"-algorithm", "leaky-shape", "-t0", "2026-03-28"}, "-t0 and -tz need -algorithm daily or monthly"},
		{[]string{"-algorithm", "daily", "-plot", "x.svg"}, "-plot with -algorithm daily: the picture draws the buckets of rates"},
		{[]string{"-algorithm", "daily", "-log", "common", "-t0", "2026-03-28"}, "-t0 with -log: time 0 is the first line's timestamp"},
		{[]string{"-algorithm", "daily", "-t0", "yesterday"}, `-t0 "yesterday": want a time in -tz such as 2026-03-28T00:00:00, a date such as 2026-03-28, or a time with its offset`},
		{[]string{"-algorithm", "daily", "-t0", "2026-03-28T24:00:00"}, `-t0 "2026-03-28T24:00:00": want a time in -tz`},
		{[]string{"-algorithm", "daily", "-t0", "2026-03-28 00:00:00"}, `-t0 "2026-03-28 00:00:00": want a time in -tz`},
		{[]string{"-algorithm", "daily", "-t0", "1899-12-31T23:59:59"}, "-t0 1899-12-31T23:59:59: want a time from 1900-01-01 to 2200-01-01 (UTC)"},
		{[]string{"-algorithm", "daily", "-t0", "2200-01-01T00:00:00Z"}, "-t0 2200-01-01T00:00:00Z: want a time from 1900-01-01 to 2200-01-01 (UTC)"},
		{[]string{"-algorithm", "daily", "-tz", "Europe/Paris", "-t0", "2026-03-29T02:30:00"}, "-t0 2026-03-29T02:30:00: no such time in Europe/Paris, whose clocks skip it"},
		{[]string{"-algorithm", "daily", "-tz", "Europe/Paris", "-t0", "2026-10-25T02:30:00"},
			"-t0 2026-10-25T02:30:00: twice in Europe/Paris, whose clocks go back: give the offset, 2026-10-25T02:30:00+02:00 or 2026-10-25T02:30:00+01:00"},
	} {
		stdout, stderr, code := runCLI(t, "0\n", tc.args...)
		assert.Equal(t, 2, code, "%q", tc.args)
		assert.Contains(t, stderr, "ratesim: "+tc.want, "%q", tc.args)
		assert.Empty(t, stdout, "%q", tc.args)
	}
}

func TestParseT0(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	havana, err := time.LoadLocation("America/Havana")
	require.NoError(t, err)
	for _, tc := range []struct {
		s    string
		loc  *time.Location
		want string // RFC 3339
	}{
		{"2026-03-28", time.UTC, "2026-03-28T00:00:00Z"},
		{"2026-03-28T23:30:00.25", time.UTC, "2026-03-28T23:30:00.25Z"},
		{"2026-03-28", paris, "2026-03-28T00:00:00+01:00"},
		{"2026-03-29T03:00:00", paris, "2026-03-29T03:00:00+02:00"},
		{"2026-10-25T01:59:59", paris, "2026-10-25T01:59:59+02:00"},
		{"2026-10-25T03:00:00", paris, "2026-10-25T03:00:00+01:00"},
		{"2026-10-25T02:30:00+02:00", paris, "2026-10-25T02:30:00+02:00"},
		{"2026-03-28T12:00:00Z", paris, "2026-03-28T12:00:00Z"},
		// Havana skips its midnight of 8 March 2026: the day begins at
		// 01:00, as the quota's day does.
		{"2026-03-08", havana, "2026-03-08T01:00:00-04:00"},
		{"1900-01-01T00:00:00Z", paris, "1900-01-01T00:00:00Z"},
	} {
		got, err := parseT0(tc.s, tc.loc)
		if assert.NoError(t, err, "parseT0(%q, %v)", tc.s, tc.loc) {
			assert.Equal(t, tc.want, got.Format(time.RFC3339Nano), "parseT0(%q, %v)", tc.s, tc.loc)
		}
	}
	_, err = parseT0("2026-03-08T00:30:00", havana)
	assert.EqualError(t, err, "-t0 2026-03-08T00:30:00: no such time in America/Havana, whose clocks skip it")
}

// A quota's decisions are those of a ratelimit.Limiter over the memory
// store, its clock at -t0 plus the trace's times, across daylight-saving
// changes and month ends, starting full or empty.
func TestQuotaDecisionsEqualLibrary(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 1))
	zones := []string{"UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe"}
	t0s := []string{"2026-03-07T18:00:00Z", "2026-03-27T21:00:00Z", "2026-10-24T20:00:00Z", "2026-01-30T23:00:00Z", "2026-04-03T12:00:00Z"}
	for i := range 60 {
		alg := quotaAlgorithms[i%2]
		zone, t0 := zones[r.IntN(len(zones))], t0s[r.IntN(len(t0s))]
		burst := 1 + r.Int64N(12)
		empty := r.IntN(2) == 0
		gap := 20 * time.Minute // traces of a few days
		if alg == "monthly" {
			gap = 6 * time.Hour
		}
		lines, trace := randomTrace(r, 150, burst, gap)
		start := "full"
		if empty {
			start = "empty"
		}
		args := []string{"-algorithm", alg, "-burst", strconv.FormatInt(burst, 10), "-tz", zone, "-t0", t0, "-start", start, "-format", "csv"}
		stdout, stderr, code := runCLI(t, trace, args...)
		require.Equal(t, 0, code, stderr)
		rows := parseCSV(t, stdout)
		require.Len(t, rows, len(lines))

		loc, err := time.LoadLocation(zone)
		require.NoError(t, err)
		epoch, err := time.Parse(time.RFC3339, t0)
		require.NoError(t, err)
		lim, clock := libraryLimiter(t, ratelimit.Policy{Limit: quotaLimit(alg, burst, loc)}, epoch, empty)
		if !checkLibrary(t, lim, clock, lines, rows, fmt.Sprintf("trace %d (%q)", i, args)) {
			return
		}
	}
}

// The example of docs/ratesim.md: a daily quota in Europe/Paris the night
// its clocks go forward.
func TestQuotaExample(t *testing.T) {
	stdout, stderr, code := runCLI(t, "", "-algorithm", "daily", "-burst", "3", "-tz", "Europe/Paris", "-t0", "2026-03-28T23:00:00", "testdata/daily.trace")
	require.Equal(t, 0, code, stderr)
	golden(t, "daily.table.golden", stdout)
	golden(t, "daily.stderr.golden", stderr)
}
