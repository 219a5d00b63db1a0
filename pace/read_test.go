package pace_test

import (
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/fakeclock"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
	"github.com/tokenfair/ratelimit/pace"
)

// header returns the header of the field lines kv (name, value, ...), as
// a client receives them: names canonicalised, one entry per line.
func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// readCase is a response's fields and the quota Read must find in them
// (ok false: none).
type readCase struct {
	name   string
	fields []string
	want   pace.Quota
	ok     bool
}

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func checkRead(t *testing.T, cases []readCase) {
	t.Helper()
	for _, c := range cases {
		got, ok := pace.Read(header(c.fields...), now)
		if assert.Equal(t, c.ok, ok, "%s: Read(%q) found a quota", c.name, c.fields) && ok {
			assert.Equal(t, c.want, got, "%s: Read(%q)", c.name, c.fields)
		}
	}
}

// TestReadDraftExamples: the examples of draft-ietf-httpapi-ratelimit-headers
// -10, and the older drafts' forms, as standards.md collects them.
func TestReadDraftExamples(t *testing.T) {
	checkRead(t, []readCase{
		{"default", []string{"RateLimit-Policy", `"default";q=100;w=60`, "RateLimit", `"default";r=50;t=30`},
			pace.Quota{Policy: "default", Remaining: 50, Reset: 30 * time.Second, Limit: 100, Window: time.Minute, Unit: "requests"}, true},
		{"no reset time", []string{"RateLimit", `"default";r=999;pk=:dHJpYWwxMjEzMjM=:`},
			pace.Quota{Policy: "default", Remaining: 999, Unit: "requests", Partition: "trial121323"}, true},
		{"content-bytes, some left: no quota of requests", []string{"RateLimit-Policy", `"default";q=65535;qu="content-bytes";w=10;pk=:QXBwLTk5OQ==:`, "RateLimit", `"default";r=300000000;t=60;pk=:QXBwLTk5OQ==:`},
			pace.Quota{}, false},
		{"pk on the policy only, as express-rate-limit sends it", []string{"RateLimit-Policy", `"5-in-2sec"; q=5; w=2; pk=:MTJjYTE3YjQ5YWYy:`, "RateLimit", `"5-in-2sec"; r=4; t=2`},
			pace.Quota{Policy: "5-in-2sec", Remaining: 4, Reset: 2 * time.Second, Limit: 5, Window: 2 * time.Second, Unit: "requests", Partition: "12ca17b49af2"}, true},
		{"two policies, one limit", []string{"RateLimit-Policy", `"hour";q=1000;w=3600, "day";q=5000;w=86400`, "RateLimit", `"day";r=100;t=36000`},
			pace.Quota{Policy: "day", Remaining: 100, Reset: 10 * time.Hour, Limit: 5000, Window: 24 * time.Hour, Unit: "requests"}, true},
		{"on a 301", []string{"RateLimit", `"problemPolicy";r=0;t=10`},
			pace.Quota{Policy: "problemPolicy", Reset: 10 * time.Second, Unit: "requests"}, true},
		{"pushing back", []string{"Retry-After", "20", "RateLimit-Policy", `"dynamic";q=100;w=60`, "RateLimit", `"dynamic";r=15;t=40`},
			pace.Quota{Policy: "dynamic", Remaining: 15, Reset: 40 * time.Second, Limit: 100, Window: time.Minute, Unit: "requests"}, true},
		{"a space after ;, an extension parameter", []string{"RateLimit-Policy", `"x"; q=10; w=1; acme-burst=1000`, "RateLimit", `"x"; r=3; t=1; acme-cost=2`},
			pace.Quota{Policy: "x", Remaining: 3, Reset: time.Second, Limit: 10, Window: time.Second, Unit: "requests"}, true},
		{"token names", []string{"RateLimit-Policy", `quota;q=100;w=1`, "RateLimit", `quota;r=5;t=1`},
			pace.Quota{Policy: "quota", Remaining: 5, Reset: time.Second, Limit: 100, Window: time.Second, Unit: "requests"}, true},
		{"no r (issue 169)", []string{"RateLimit-Policy", `quota;q=100;w=1`, "RateLimit", `quota;t=1`}, pace.Quota{}, false},
		{"split over two lines: the fewest left", []string{"RateLimit", `"a";r=5;t=1`, "RateLimit", `"b";r=2;t=3, "c";r=4`},
			pace.Quota{Policy: "b", Remaining: 2, Reset: 3 * time.Second, Unit: "requests"}, true},
		{"all spent: the longest wait", []string{"RateLimit", `"a";r=0;t=1, "b";r=0;t=30, "c";r=0;t=2`},
			pace.Quota{Policy: "b", Reset: 30 * time.Second, Unit: "requests"}, true},
		{"draft-07", []string{"RateLimit", `limit=100, remaining=50, reset=5`, "RateLimit-Policy", `100;w=60`},
			pace.Quota{Remaining: 50, Reset: 5 * time.Second, Limit: 100, Window: time.Minute, Unit: "requests"}, true},
		{"draft-07 without remaining", []string{"RateLimit", `limit=100, reset=5`}, pace.Quota{}, false},
		{"draft-06", []string{"RateLimit-Policy", `100;w=60`, "RateLimit-Limit", "100", "RateLimit-Remaining", "50", "RateLimit-Reset", "50"},
			pace.Quota{Remaining: 50, Reset: 50 * time.Second, Limit: 100, Window: time.Minute, Unit: "requests"}, true},
		{"draft-03, the policy in the limit", []string{"RateLimit-Limit", "10, 10;w=1, 50;w=60", "RateLimit-Remaining", "5", "RateLimit-Reset", "1"},
			pace.Quota{Remaining: 5, Reset: time.Second, Limit: 10, Window: time.Second, Unit: "requests"}, true},
		{"Envoy", []string{"X-RateLimit-Limit", `10, 10;window=1;name="per-ip", 1000;window=3600`, "X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "1"},
			pace.Quota{Remaining: 3, Reset: time.Second, Limit: 10, Window: time.Second, Unit: "requests"}, true},
		{"Reddit's decimals", []string{"X-Ratelimit-Remaining", "599.0", "X-Ratelimit-Reset", "372", "X-Ratelimit-Used", "1"},
			pace.Quota{Remaining: 599, Reset: 372 * time.Second, Unit: "requests"}, true},
		{"a reset of 1.5 s", []string{"RateLimit-Remaining", "0", "RateLimit-Reset", "1.5"},
			pace.Quota{Reset: 1500 * time.Millisecond, Unit: "requests"}, true},
		{"the policy alone declares nothing left", []string{"RateLimit-Policy", `"default";q=10;w=2`}, pace.Quota{}, false},
		{"no field", nil, pace.Quota{}, false},
	})
}

// TestReadUnixReset: a reset of 10⁹ or more is a Unix time, taken
// relative to the response's Date (else now), and ignored when further
// than a year from it, as GitHub sends it.
func TestReadUnixReset(t *testing.T) {
	reset := now.Add(10 * time.Minute).Unix()
	github := []string{"X-RateLimit-Limit", "30", "X-RateLimit-Remaining", "14", "X-RateLimit-Reset", strconv.FormatInt(reset, 10), "X-RateLimit-Used", "16", "X-RateLimit-Resource", "search"}
	dated := append([]string{"Date", now.Add(9 * time.Minute).Format(http.TimeFormat)}, github...)
	gitlab := []string{"RateLimit-Limit", "60", "RateLimit-Remaining", "0", "RateLimit-Reset", strconv.FormatInt(reset, 10)}
	checkRead(t, []readCase{
		{"GitHub", github, pace.Quota{Remaining: 14, Reset: 10 * time.Minute, Limit: 30, Unit: "requests"}, true},
		{"relative to Date", dated, pace.Quota{Remaining: 14, Reset: time.Minute, Limit: 30, Unit: "requests"}, true},
		{"GitLab", gitlab, pace.Quota{Reset: 10 * time.Minute, Limit: 60, Unit: "requests"}, true},
		{"just below 10⁹: a delta", []string{"RateLimit-Remaining", "0", "RateLimit-Reset", "999999999"}, pace.Quota{Reset: 999999999 * time.Second, Unit: "requests"}, true},
		{"in the past", []string{"RateLimit-Remaining", "0", "RateLimit-Reset", strconv.FormatInt(now.Add(-time.Hour).Unix(), 10)}, pace.Quota{Unit: "requests"}, true},
		{"two years ahead: no reset", []string{"RateLimit-Remaining", "0", "RateLimit-Reset", strconv.FormatInt(now.AddDate(2, 0, 0).Unix(), 10)}, pace.Quota{Unit: "requests"}, true},
		{"in milliseconds: no reset", []string{"RateLimit-Remaining", "0", "RateLimit-Reset", strconv.FormatInt(now.UnixMilli(), 10)}, pace.Quota{Unit: "requests"}, true},
	})
}

// TestReadHostile: malformed, negative, oversized and contradictory fields
// are ignored, never read into a negative or endless wait.
func TestReadHostile(t *testing.T) {
	legacy := []string{"RateLimit-Remaining", "4", "RateLimit-Reset", "2"}
	fromLegacy := pace.Quota{Remaining: 4, Reset: 2 * time.Second, Unit: "requests"}
	checkRead(t, []readCase{
		{"negative r", []string{"RateLimit", `"default";r=-1;t=5`}, pace.Quota{}, false},
		{"negative t", []string{"RateLimit", `"default";r=5;t=-1`}, pace.Quota{}, false},
		{"a decimal r", []string{"RateLimit", `"default";r=1.5`}, pace.Quota{}, false},
		{"a string t", []string{"RateLimit", `"default";r=1;t="5"`}, pace.Quota{}, false},
		{"a token pk", []string{"RateLimit", `"default";r=1;pk=abc`}, pace.Quota{}, false},
		{"an integer name", []string{"RateLimit", `5;r=1`}, pace.Quota{}, false},
		{"a bad item beside a good one", []string{"RateLimit", `"a";r=-1, "b";r=3;t=1`},
			pace.Quota{Policy: "b", Remaining: 3, Reset: time.Second, Unit: "requests"}, true},
		{"a List that does not parse falls back", append([]string{"RateLimit", `"default";r=0;t=5,`}, legacy...), fromLegacy, true},
		{"non-ASCII", append([]string{"RateLimit", "\"d\u00e9fault\";r=0;t=5"}, legacy...), fromLegacy, true},
		{"the IETF fields first", append([]string{"RateLimit", `"default";r=9;t=1`}, legacy...),
			pace.Quota{Policy: "default", Remaining: 9, Reset: time.Second, Unit: "requests"}, true},
		{"an endless t is the longest Duration", []string{"RateLimit", `"default";r=0;t=999999999999999`},
			pace.Quota{Policy: "default", Reset: math.MaxInt64, Unit: "requests"}, true},
		{"an integer of 16 digits", []string{"RateLimit", `"default";r=0;t=1000000000000000`}, pace.Quota{}, false},
		{"a bad policy item is no description", []string{"RateLimit-Policy", `"default";q=-10;w=0;qu=bytes`, "RateLimit", `"default";r=1`},
			pace.Quota{Policy: "default", Remaining: 1, Unit: "requests"}, true},
		{"a policy that does not parse", []string{"RateLimit-Policy", `"default";q=10;w=2,`, "RateLimit", `"default";r=1`},
			pace.Quota{Policy: "default", Remaining: 1, Unit: "requests"}, true},
		{"oversized", append([]string{"RateLimit", `"default";r=0;t=5;x="` + strings.Repeat("x", 9000) + `"`}, legacy...), fromLegacy, true},
		{"draft-07, negative", []string{"RateLimit", `limit=100, remaining=-5, reset=5`}, pace.Quota{}, false},
		{"draft-07, a decimal", []string{"RateLimit", `limit=100, remaining=5, reset=1.5`}, pace.Quota{}, false},
		{"two lines that differ", []string{"RateLimit-Remaining", "5", "RateLimit-Remaining", "7"}, pace.Quota{}, false},
		{"negative remaining", []string{"RateLimit-Remaining", "-5", "RateLimit-Reset", "1"}, pace.Quota{}, false},
		{"a remaining that is no number", []string{"X-RateLimit-Remaining", "lots"}, pace.Quota{}, false},
		{"a negative reset is no reset", []string{"RateLimit-Remaining", "0", "RateLimit-Reset", "-3"}, pace.Quota{Unit: "requests"}, true},
		{"a reset that is a date is no reset", []string{"RateLimit-Remaining", "0", "RateLimit-Reset", now.Format(http.TimeFormat)}, pace.Quota{Unit: "requests"}, true},
		{"a negative limit is no limit", []string{"RateLimit-Remaining", "1", "RateLimit-Limit", "-1"}, pace.Quota{Remaining: 1, Unit: "requests"}, true},
	})
}

// readAllCase is a response's fields and the quotas ReadAll must find in
// them, in order (nil: none).
type readAllCase struct {
	name   string
	fields []string
	want   []pace.Quota
}

func checkReadAll(t *testing.T, cases []readAllCase) {
	t.Helper()
	for _, c := range cases {
		got := pace.ReadAll(header(c.fields...), now)
		assert.Equal(t, c.want, got, "%s: ReadAll(%q)", c.name, c.fields)
	}
}

// The example: a quota of requests, one of bytes a day and one of
// the server's own unit, tokens.
var (
	multiUnitPolicy = []string{"RateLimit-Policy", `"rate";q=10;w=1, "daily-bytes";q=1000000;qu="content-bytes";w=86400, "tokens";q=50000;qu="tokens";w=60`}
	rateQuota       = pace.Quota{Policy: "rate", Remaining: 9, Reset: time.Second, Limit: 10, Window: time.Second, Unit: "requests"}
	bytesQuota      = pace.Quota{Policy: "daily-bytes", Remaining: 5, Reset: time.Hour, Limit: 1000000, Window: 24 * time.Hour, Unit: "content-bytes"}
	tokensQuota     = pace.Quota{Policy: "tokens", Remaining: 42000, Reset: 20 * time.Second, Limit: 50000, Window: time.Minute, Unit: "tokens"}
)

// multiUnit returns the fields of the example, with rl as the
// RateLimit field.
func multiUnit(rl string) []string { return append(slices.Clone(multiUnitPolicy), "RateLimit", rl) }

// with returns q with its Remaining and Reset changed.
func with(q pace.Quota, remaining int64, reset time.Duration) pace.Quota {
	q.Remaining, q.Reset = remaining, reset
	return q
}

// TestReadUnits: Read finds the quota that binds the requests, among
// quotas in several units: of those that count requests, and of those in
// any unit that are spent, the fewest left, then the longest reset.
func TestReadUnits(t *testing.T) {
	checkRead(t, []readCase{
		{"the issue's example: the rate binds", multiUnit(`"rate";r=9;t=1, "daily-bytes";r=5;t=3600, "tokens";r=42000;t=20`), rateQuota, true},
		{"bytes spent bind until their reset", multiUnit(`"rate";r=9;t=1, "daily-bytes";r=0;t=3600, "tokens";r=42000;t=20`), with(bytesQuota, 0, time.Hour), true},
		{"spent in two units: the longest reset", multiUnit(`"rate";r=0;t=1, "daily-bytes";r=5;t=3600, "tokens";r=0;t=20`), with(tokensQuota, 0, 20*time.Second), true},
		{"requests spent, bytes left", multiUnit(`"rate";r=0;t=1, "daily-bytes";r=5;t=3600`), with(rateQuota, 0, time.Second), true},
		{"bytes alone, some left", multiUnit(`"daily-bytes";r=5;t=3600, "tokens";r=1;t=20`), pace.Quota{}, false},
		{"bytes alone, spent, no reset", multiUnit(`"daily-bytes";r=0`), with(bytesQuota, 0, 0), true},
		{"no RateLimit-Policy: requests", []string{"RateLimit", `"daily-bytes";r=5;t=3600`},
			pace.Quota{Policy: "daily-bytes", Remaining: 5, Reset: time.Hour, Unit: "requests"}, true},
		{"a policy that names no unit: requests", []string{"RateLimit-Policy", `"a";q=10;w=1`, "RateLimit", `"a";r=7`},
			pace.Quota{Policy: "a", Remaining: 7, Limit: 10, Window: time.Second, Unit: "requests"}, true},
		{"a policy of another name: requests", multiUnit(`"other";r=7`), pace.Quota{Policy: "other", Remaining: 7, Unit: "requests"}, true},
		{`"request", as the IANA table of -10 spells it`, []string{"RateLimit-Policy", `"a";q=10;qu="request", "b";q=100;qu="content-bytes"`, "RateLimit", `"a";r=3;t=1, "b";r=2;t=1`},
			pace.Quota{Policy: "a", Remaining: 3, Reset: time.Second, Limit: 10, Unit: "request"}, true},
		{"concurrent-requests, some left", []string{"RateLimit-Policy", `"c";q=2;qu="concurrent-requests"`, "RateLimit", `"c";r=1, "rate";r=5`},
			pace.Quota{Policy: "rate", Remaining: 5, Unit: "requests"}, true},
	})
}

// TestReadAll: a quota for each RateLimit item, in the order of the field,
// in whatever unit, described by RateLimit-Policy; for the older forms,
// the one quota they declare.
func TestReadAll(t *testing.T) {
	checkReadAll(t, []readAllCase{
		{"the issue's example", multiUnit(`"rate";r=9;t=1, "daily-bytes";r=5;t=3600, "tokens";r=42000;t=20`),
			[]pace.Quota{rateQuota, bytesQuota, tokensQuota}},
		{"in the order of the field, over two lines", append(multiUnit(`"tokens";r=42000;t=20`), "RateLimit", `"rate";r=9;t=1`),
			[]pace.Quota{tokensQuota, rateQuota}},
		{"the pending spellings", multiUnit(`"rate";a=9;w=1;c=1, "tokens";a=42000;w=20;c=800`),
			[]pace.Quota{{Policy: "rate", Remaining: 9, Reset: time.Second, Limit: 10, Window: time.Second, Unit: "requests", Cost: 1},
				{Policy: "tokens", Remaining: 42000, Reset: 20 * time.Second, Limit: 50000, Window: time.Minute, Unit: "tokens", Cost: 800}}},
		{"bad items are left out", multiUnit(`"rate";r=-1;t=1, "daily-bytes";r=5;t=3600, "tokens";r=42000;t=20;c=-5`),
			[]pace.Quota{bytesQuota}},
		{"one partition each", []string{"RateLimit-Policy", `"p";q=10;pk=:YQ==:, "p";q=20;pk=:Yg==:`, "RateLimit", `"p";r=1;pk=:Yg==:, "p";r=2;pk=:YQ==:`},
			[]pace.Quota{{Policy: "p", Remaining: 1, Limit: 20, Unit: "requests", Partition: "b"}, {Policy: "p", Remaining: 2, Limit: 10, Unit: "requests", Partition: "a"}}},
		{"draft-07", []string{"RateLimit", `limit=100, remaining=50, reset=5`, "RateLimit-Policy", `100;w=60`},
			[]pace.Quota{{Remaining: 50, Reset: 5 * time.Second, Limit: 100, Window: time.Minute, Unit: "requests"}}},
		{"X-RateLimit-*", []string{"X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "1"},
			[]pace.Quota{{Remaining: 3, Reset: time.Second, Limit: 10, Unit: "requests"}}},
		{"no well-formed item: the older form", []string{"RateLimit", `"a";r=-1`, "RateLimit-Remaining", "4"},
			[]pace.Quota{{Remaining: 4, Unit: "requests"}}},
		{"the policy alone", multiUnitPolicy, nil},
		{"no field", nil, nil},
	})
}

// TestReadPendingSpellings: the spellings of the draft's pending revision
// (PR 166): a for r and w for t in RateLimit, of both the fewer left and
// the longer reset, and c, the cost, read into Cost; malformed or negative
// ones make their item ignored. w in RateLimit-Policy is still the window.
func TestReadPendingSpellings(t *testing.T) {
	policy := []string{"RateLimit-Policy", `"default";q=100;w=60`}
	described := pace.Quota{Policy: "default", Limit: 100, Window: time.Minute, Unit: "requests"}
	checkRead(t, []readCase{
		{"a and w", append(slices.Clone(policy), "RateLimit", `"default";a=50;w=30`), with(described, 50, 30*time.Second), true},
		{"a without w", []string{"RateLimit", `"default";a=0`}, pace.Quota{Policy: "default", Unit: "requests"}, true},
		{"c, the cost", []string{"RateLimit", `"default";r=49;t=30;c=1`},
			pace.Quota{Policy: "default", Remaining: 49, Reset: 30 * time.Second, Unit: "requests", Cost: 1}, true},
		{"c of 0", []string{"RateLimit", `"default";a=49;c=0`}, pace.Quota{Policy: "default", Remaining: 49, Unit: "requests"}, true},
		{"r and a: the fewer left", []string{"RateLimit", `"default";r=5;a=3;t=1`},
			pace.Quota{Policy: "default", Remaining: 3, Reset: time.Second, Unit: "requests"}, true},
		{"a and r: the fewer left", []string{"RateLimit", `"default";a=3;r=5`}, pace.Quota{Policy: "default", Remaining: 3, Unit: "requests"}, true},
		{"t and w: the longer reset", []string{"RateLimit", `"default";r=1;t=2;w=5`},
			pace.Quota{Policy: "default", Remaining: 1, Reset: 5 * time.Second, Unit: "requests"}, true},
		{"w and t: the longer reset", []string{"RateLimit", `"default";r=1;w=5;t=2`},
			pace.Quota{Policy: "default", Remaining: 1, Reset: 5 * time.Second, Unit: "requests"}, true},
		{"the same value in both spellings", append(slices.Clone(policy), "RateLimit", `"default";r=50;a=50;t=30;w=30`), with(described, 50, 30*time.Second), true},
		{"the pending spellings' fewest left", []string{"RateLimit", `"a";a=5;w=1, "b";r=2;w=3, "c";a=2;t=2`},
			pace.Quota{Policy: "b", Remaining: 2, Reset: 3 * time.Second, Unit: "requests"}, true},
		{"negative a", []string{"RateLimit", `"default";a=-1;w=5`}, pace.Quota{}, false},
		{"r, and a negative a", []string{"RateLimit", `"default";r=5;a=-1`}, pace.Quota{}, false},
		{"a, and a decimal r", []string{"RateLimit", `"default";a=5;r=1.5`}, pace.Quota{}, false},
		{"a Boolean a", []string{"RateLimit", `"default";a`}, pace.Quota{}, false},
		{"negative w", []string{"RateLimit", `"default";a=5;w=-1`}, pace.Quota{}, false},
		{"t, and a string w", []string{"RateLimit", `"default";r=5;t=1;w="60"`}, pace.Quota{}, false},
		{"negative c", []string{"RateLimit", `"default";r=5;c=-1`}, pace.Quota{}, false},
		{"a decimal c", []string{"RateLimit", `"default";r=5;c=0.5`}, pace.Quota{}, false},
		{"c alone", []string{"RateLimit", `"default";c=1;w=5`}, pace.Quota{}, false},
		{"a bad c beside a good item", []string{"RateLimit", `"a";r=1;c=-1, "b";a=3;w=1`},
			pace.Quota{Policy: "b", Remaining: 3, Reset: time.Second, Unit: "requests"}, true},
		{"an endless w is the longest Duration", []string{"RateLimit", `"default";a=0;w=999999999999999`},
			pace.Quota{Policy: "default", Reset: math.MaxInt64, Unit: "requests"}, true},
	})
}

// TestRetryAfter: delay-seconds, and HTTP-dates in each of their forms,
// relative to the response's Date (else now); never negative.
func TestRetryAfter(t *testing.T) {
	cases := []struct {
		fields []string
		want   time.Duration
		ok     bool
	}{
		{[]string{"Retry-After", "120"}, 2 * time.Minute, true},
		{[]string{"Retry-After", "0"}, 0, true},
		{[]string{"Retry-After", "007"}, 7 * time.Second, true},
		{[]string{"Retry-After", now.Add(time.Hour).Format(http.TimeFormat)}, time.Hour, true},
		{[]string{"Retry-After", now.Add(time.Hour).Format(time.RFC850)}, time.Hour, true},
		{[]string{"Retry-After", now.Add(time.Hour).Format(time.ANSIC)}, time.Hour, true},
		{[]string{"Date", "Mon, 05 Aug 2019 09:27:00 GMT", "Retry-After", "Mon, 05 Aug 2019 09:27:05 GMT"}, 5 * time.Second, true},
		{[]string{"Retry-After", now.Add(-time.Hour).Format(http.TimeFormat)}, 0, true},
		{[]string{"Retry-After", "99999999999999999999"}, math.MaxInt64, true},
		{[]string{"Retry-After", "5", "Retry-After", "5"}, 5 * time.Second, true},
		{[]string{"Retry-After", "5", "Retry-After", "6"}, 0, false},
		{[]string{"Retry-After", "-5"}, 0, false},
		{[]string{"Retry-After", "1.5"}, 0, false},
		{[]string{"Retry-After", "soon"}, 0, false},
		{[]string{"Retry-After", ""}, 0, false},
		{nil, 0, false},
	}
	for _, c := range cases {
		got, ok := pace.RetryAfter(header(c.fields...), now)
		assert.Equal(t, c.ok, ok, "RetryAfter(%q) found a wait", c.fields)
		assert.Equal(t, c.want, got, "RetryAfter(%q)", c.fields)
	}
}

// TestReadMiddlewareFormats: the fields this module's middleware writes, in
// each of its formats, as a handler in the same process sees them and as
// a client does, read back as the decisions that made them: a bucket of
// 10 refilled 5 a second, spent by 12 requests at once.
func TestReadMiddlewareFormats(t *testing.T) {
	for _, format := range []ratelimit.HeaderFormat{ratelimit.HeadersIETF, ratelimit.HeadersLegacy, ratelimit.HeadersX} {
		name, _ := format.MarshalText()
		t.Run(string(name), func(t *testing.T) {
			clock := new(fakeclock.Clock)
			h := limited(t, clock.Now, &ratelimit.MiddlewareOptions{Headers: format}, ratelimit.Policy{Limit: ratelimit.PerSecond(5).WithBurst(10)})
			for i := int64(1); i <= 12; i++ {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, apiRequest())
				want := pace.Quota{Remaining: max(10-i, 0), Unit: "requests", Limit: 10}
				if format == ratelimit.HeadersIETF {
					// t: until the next token, or on a refusal Retry-After.
					want.Policy, want.Window, want.Reset = "default", 2*time.Second, time.Second
				} else {
					// The reset: until the bucket is full, rounded up.
					want.Reset = time.Duration((min(i, 10)*200+999)/1000) * time.Second
				}
				for _, hdr := range []http.Header{w.Header(), wire(w.Header())} {
					got, ok := pace.Read(hdr, clock.Now())
					require.True(t, ok, "request %d: Read(%v)", i, hdr)
					assert.Equal(t, want, got, "request %d: Read(%v)", i, hdr)
				}
				if i > 10 {
					d, ok := pace.RetryAfter(w.Header(), clock.Now())
					assert.True(t, ok)
					assert.Equal(t, time.Second, d, "request %d: RetryAfter", i)
				}
			}
		})
	}
}

// TestReadMiddlewarePolicies: with several policies, in bytes, and in
// flight, Read finds the binding policy's quota and its description.
func TestReadMiddlewarePolicies(t *testing.T) {
	clock := new(fakeclock.Clock)
	h := limited(t, clock.Now, nil,
		ratelimit.Policy{Name: "per-key", Limit: ratelimit.PerSecond(5).WithBurst(10)},
		ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(3, time.UTC)})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, apiRequest())
	got, ok := pace.Read(wire(w.Header()), clock.Now())
	require.True(t, ok)
	// 2026-01-01T00:00Z: the day ends in 24 hours.
	assert.Equal(t, pace.Quota{Policy: "daily", Remaining: 2, Reset: 24 * time.Hour, Limit: 3, Window: 24 * time.Hour, Unit: "requests"}, got)

	// A quota of bytes with some left binds no request; ReadAll has it.
	h = limited(t, clock.Now, nil, ratelimit.Policy{Name: "bandwidth", Limit: ratelimit.Per(1000, time.Minute), Unit: "content-bytes"})
	w = httptest.NewRecorder()
	h.ServeHTTP(w, apiRequest())
	got, ok = pace.Read(wire(w.Header()), clock.Now())
	assert.False(t, ok, "Read(%v) = %+v, true", w.Header(), got)
	assert.Equal(t, []pace.Quota{{Policy: "bandwidth", Remaining: 999, Reset: time.Second, Limit: 1000, Window: time.Minute, Unit: "content-bytes"}},
		pace.ReadAll(wire(w.Header()), clock.Now()))
}

// limited returns a handler answering "ok" behind a Middleware of
// policies, keyed by X-API-Key, on a memory store of clock.
func limited(t *testing.T, clock func() time.Time, opts *ratelimit.MiddlewareOptions, policies ...ratelimit.Policy) http.Handler {
	t.Helper()
	var storeOpts *memorystore.Options
	if clock != nil {
		storeOpts = &memorystore.Options{Clock: clock}
		if opts == nil {
			opts = &ratelimit.MiddlewareOptions{}
		}
		opts.Clock = clock
	}
	store, err := memorystore.New(storeOpts)
	require.NoError(t, err)
	lim, err := ratelimit.New(store, policies...)
	require.NoError(t, err)
	mw, err := ratelimit.NewMiddleware(lim, ratelimit.KeyByAPIKey("X-API-Key"), opts)
	require.NoError(t, err)
	return nethttp.Wrap(mw)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok"))
	}))
}

func apiRequest() *http.Request {
	r := httptest.NewRequest("GET", "/geocode?q=paris", nil)
	r.Header.Set("X-API-Key", "demo")
	return r
}

// wire returns h as a client receives it: every name canonicalised.
func wire(h http.Header) http.Header {
	out := http.Header{}
	for k, vs := range h {
		for _, v := range vs {
			out.Add(k, v)
		}
	}
	return out
}

// FuzzRead: no field values make Read or RetryAfter panic, or return a
// negative count or wait.
func FuzzRead(f *testing.F) {
	f.Add(`"default";r=9;t=1`, `"default";q=10;w=2`, "9", "1", "Mon, 05 Aug 2019 09:27:05 GMT")
	f.Add(`limit=100, remaining=50, reset=5`, `100;w=60`, "599.0", "1655120964", "120")
	f.Add(`"a";r=0;t=1, "b";r=0;t=30`, `"a";q=1;qu="concurrent-requests"`, "-1", "99999999999999", "-5")
	f.Add(`"rate";a=9;w=1;c=1, "bytes";r=0;a=5;t=3600;w=60`, `"rate";q=10;w=1, "bytes";q=1000;qu="content-bytes";w=86400`, "0", "1.5", "0")
	f.Fuzz(func(t *testing.T, rl, policy, remaining, reset, retryAfter string) {
		for _, h := range []http.Header{
			header("RateLimit", rl, "RateLimit-Policy", policy, "Retry-After", retryAfter),
			header("RateLimit-Remaining", remaining, "RateLimit-Reset", reset, "RateLimit-Limit", policy),
			header("X-RateLimit-Remaining", remaining, "X-RateLimit-Reset", reset, "Date", retryAfter),
		} {
			all := pace.ReadAll(h, now)
			for _, q := range all {
				if q.Remaining < 0 || q.Reset < 0 || q.Limit < 0 || q.Window < 0 || q.Cost < 0 {
					t.Fatalf("ReadAll(%v) = %+v", h, all)
				}
			}
			if q, ok := pace.Read(h, now); ok && !slices.Contains(all, q) {
				t.Fatalf("Read(%v) = %+v, not one of ReadAll's %+v", h, q, all)
			}
			if d, ok := pace.RetryAfter(h, now); d < 0 || !ok && d != 0 {
				t.Fatalf("RetryAfter(%v) = %v, %v", h, d, ok)
			}
		}
	})
}

// BenchmarkRead: what reading an answer's fields costs the Transport, in
// the IETF form and in the X- form.
func BenchmarkRead(b *testing.B) {
	for _, c := range []struct {
		name string
		h    http.Header
	}{
		{"ietf", header("RateLimit-Policy", `"default";q=10;w=2`, "RateLimit", `"default";r=9;t=1`)},
		{"x", header("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "9", "X-RateLimit-Reset", "2")},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if q, ok := pace.Read(c.h, now); !ok || q.Remaining != 9 {
						b.Fatal(q, ok)
					}
				}
			})
		})
	}
}
