package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseLogLine(t *testing.T) {
	var l logLine
	common := `127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326`
	require.NoError(t, parseLogLine([]byte(common), false, &l))
	assert.Equal(t, []string{"127.0.0.1", "-", "frank", "10/Oct/2000:13:55:36 -0700", "GET /apache_pb.gif HTTP/1.0", "200", "2326"},
		[]string{string(l.host), string(l.ident), string(l.user), string(l.stamp), string(l.request), string(l.status), string(l.bytes)})

	combined := common + ` "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)"`
	require.NoError(t, parseLogLine([]byte(combined), true, &l))
	assert.Equal(t, "http://www.example.com/start.html", string(l.referer))
	assert.Equal(t, "Mozilla/4.08 [en] (Win98; I ;Nav)", string(l.userAgent))
	require.NoError(t, parseLogLine([]byte(combined), false, &l), "a Combined line read as Common")
	assert.Nil(t, l.referer)

	escaped := `::1 - - [01/Jan/2026:00:00:00 +0000] "GET /q?x=\"a b\" HTTP/1.1" 200 - "" "agent \"x\" \\"`
	require.NoError(t, parseLogLine([]byte(escaped), true, &l))
	assert.Equal(t, `GET /q?x=\"a b\" HTTP/1.1`, string(l.request))
	assert.Equal(t, "-", string(l.bytes))
	assert.Empty(t, l.referer)
	assert.Equal(t, `agent \"x\" \\`, string(l.userAgent))

	spaced := `host  ident  user name  [01/Jan/2026:00:00:00 +0000]  "GET / HTTP/1.1"  200  5`
	require.NoError(t, parseLogLine([]byte(spaced), false, &l))
	assert.Equal(t, "user name", string(l.user))
}

func TestParseLogLineErrors(t *testing.T) {
	const ok = `1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 5`
	for _, tc := range []struct {
		line     string
		combined bool
		want     string
	}{
		{"", false, "missing host"},
		{"1.2.3.4", false, "missing ident"},
		{"1.2.3.4 - -", false, "no user followed by a [timestamp]"},
		{"1.2.3.4 - [10/Oct/2000:13:55:36 -0700]", false, "no user followed by a [timestamp]"},
		{"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700", false, "unterminated [timestamp]"},
		{"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] GET", false, "missing quoted request"},
		{`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET`, false, "unterminated quoted request"},
		{`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET"`, false, "missing status"},
		{`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET" OK 5`, false, `status "OK": not a number`},
		{`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET" 200`, false, "missing size"},
		{`1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET" 200 5k`, false, `size "5k": not a number or -`},
		{ok, true, "missing quoted referer"},
		{ok + ` "-"`, true, "missing quoted user-agent"},
		{ok + ` "-" "curl`, true, "unterminated quoted user-agent"},
	} {
		var l logLine
		err := parseLogLine([]byte(tc.line), tc.combined, &l)
		if assert.Error(t, err, "%q", tc.line) {
			assert.Equal(t, tc.want, err.Error(), "%q", tc.line)
		}
	}
}

func TestParseStamp(t *testing.T) {
	for _, tc := range []struct {
		stamp string
		want  time.Time
	}{
		{"10/Oct/2000:13:55:36 -0700", time.Date(2000, 10, 10, 20, 55, 36, 0, time.UTC)},
		{"10/Oct/2000:22:55:36 +0200", time.Date(2000, 10, 10, 20, 55, 36, 0, time.UTC)},
		{"29/Feb/2024:00:00:00 +0000", time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC)},
		{"31/Dec/2016:23:59:60 +0000", time.Date(2017, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"01/Jan/2026:05:30:00 +0530", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		got, err := parseStamp([]byte(tc.stamp))
		require.NoError(t, err, tc.stamp)
		assert.Equal(t, tc.want.Unix(), got, tc.stamp)
	}
	for _, s := range []string{
		"", "10/Oct/2000:13:55:36", "10/Okt/2000:13:55:36 -0700", "30/Feb/2024:00:00:00 +0000", "29/Feb/2023:00:00:00 +0000",
		"00/Jan/2000:00:00:00 +0000", "10/Oct/2000:24:00:00 +0000", "10/Oct/2000:13:60:00 +0000", "10/Oct/2000:13:00:61 +0000",
		"10/Oct/2000:13:55:36 0700", "10/Oct/2000:13:55:36 -07:0", "10/Oct/2000:13:55:36 +2400", "1x/Oct/2000:13:55:36 +0000",
		"10/Oct/2000 13:55:36 +0000", "10/Oct/-200:13:55:36 +0000",
	} {
		_, err := parseStamp([]byte(s))
		assert.Error(t, err, "%q", s)
	}
}

func TestRequestPath(t *testing.T) {
	for req, want := range map[string]string{
		"GET /geocode?q=paris HTTP/1.1": "/geocode",
		"GET / HTTP/1.0":                "/",
		"OPTIONS * HTTP/1.1":            "*",
		"GET /x":                        "/x",
		"-":                             "",
		"":                              "",
		"GET ?q HTTP/1.1":               "",
	} {
		assert.Equal(t, want, string(requestPath([]byte(req))), "%q", req)
	}
}

// Replaying the committed access log keys the buckets by each field in turn.
func TestLogReplay(t *testing.T) {
	for _, field := range keyFields {
		t.Run(field, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, "", "-log", "combined", "-key-field", field, "-rate", "1", "-burst", "2", "-format", "csv", "testdata/access.log")
			require.Equal(t, 0, code, stderr)
			golden(t, "access."+field+".csv.golden", stdout)
			golden(t, "access."+field+".stderr.golden", stderr)
			rows := parseCSV(t, stdout)
			assert.Len(t, rows, 10)
			assert.True(t, strings.HasPrefix(stderr, "ratesim: 10 requests: "), stderr)
			assert.Contains(t, stderr, "ratesim: 1 line was out of order, by up to 2 s; replayed at the previous time\n")
		})
	}
	stdout, _, _ := runCLI(t, "", "-log", "combined", "-rate", "1", "-burst", "2", "-format", "csv", "testdata/access.log")
	rows := parseCSV(t, stdout)
	var got [][3]string
	for _, r := range rows {
		got = append(got, [3]string{r["time"], r["key"], r["allowed"]})
	}
	assert.Equal(t, [][3]string{
		{"0", "192.0.2.10", "true"}, {"0", "192.0.2.10", "true"}, {"0", "192.0.2.10", "false"},
		{"1", "198.51.100.7", "true"}, {"1", "192.0.2.10", "true"},
		{"1", "203.0.113.5", "true"}, // 2 s early: replayed at the previous time
		{"2", "2001:db8::1", "true"}, // same instant, another time zone
		{"2", "198.51.100.7", "true"},
		{"4", "192.0.2.10", "true"}, {"4", "192.0.2.10", "true"},
	}, got)

	// Read as Common, the Combined log gives the same decisions by host.
	common, stderr, code := runCLI(t, "", "-log", "common", "-rate", "1", "-burst", "2", "-format", "csv", "testdata/access.log")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, stdout, common)
}

func TestLogKeys(t *testing.T) {
	keys := func(field string) []string {
		stdout, stderr, code := runCLI(t, "", "-log", "combined", "-key-field", field, "-format", "csv", "testdata/access.log")
		require.Equal(t, 0, code, stderr)
		var ks []string
		for _, r := range parseCSV(t, stdout) {
			ks = append(ks, r["key"])
		}
		return ks
	}
	assert.Equal(t, []string{"-", "-", "-", "frank", "-", "-", "-", "frank", "-", "-"}, keys("user"))
	assert.Equal(t, []string{"/geocode", "/geocode", "/geocode", "/apache_pb.gif", "/geocode", "/login", "/healthz", "/search", "-", "/geocode"}, keys("path"))
	assert.Equal(t, `GET /search?q=\"a, b\" HTTP/1.0`, keys("request")[7])
	assert.Equal(t, "-", keys("referer")[7], "an empty field is keyed as -")
	assert.Equal(t, "Mozilla/4.08 [en] (Win98; I ;Nav)", keys("user-agent")[3])
	assert.Equal(t, "408", keys("status")[8])
}

func TestLogErrors(t *testing.T) {
	good := `1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 5` + "\n"
	for _, tc := range []struct {
		log, format, want string
	}{
		{good + "garbage\n", "common", "ratesim: line 2: missing ident\n"},
		{good + good + `1.2.3.4 - - [10/Oct/2000:13:55:36] "GET / HTTP/1.0" 200 5` + "\n", "common",
			"ratesim: line 3: timestamp \"10/Oct/2000:13:55:36\": want a date and time like 10/Oct/2000:13:55:36 -0700\n"},
		{good, "combined", "ratesim: line 1: missing quoted referer\n"},
		{good + strings.Replace(good, "2000", "2040", 1), "common",
			"ratesim: line 2: timestamp \"10/Oct/2040:13:55:36 -0700\": more than 1000000000 seconds after the first line's\n"},
	} {
		_, stderr, code := runCLI(t, tc.log, "-log", tc.format)
		assert.Equal(t, 2, code, "%q", tc.log)
		assert.Equal(t, tc.want, stderr, "%q", tc.log)
	}
	// Lines written long before the first are replayed at time 0.
	early := strings.Replace(good, "2000", "1990", 1)
	stdout, stderr, code := runCLI(t, good+early, "-log", "common", "-format", "csv")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "0", parseCSV(t, stdout)[1]["time"])
	assert.Contains(t, stderr, "out of order, by up to 315619200 s")
	// -skip-bad goes on after a malformed line.
	stdout, stderr, code = runCLI(t, good+"garbage\n"+good, "-log", "common", "-format", "csv", "-skip-bad")
	require.Equal(t, 0, code, stderr)
	assert.Len(t, parseCSV(t, stdout), 2)
	assert.Contains(t, stderr, "ratesim: skipped 1 malformed line; the first: line 2: missing ident\n")
}
