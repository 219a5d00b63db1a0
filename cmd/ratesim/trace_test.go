package main

import (
	"encoding/csv"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseTraceLine(t *testing.T) {
	for line, want := range map[string]*request{
		"":               nil,
		"   \t":          nil,
		"# comment":      nil,
		"  #3 k":         nil,
		"3":              {t: 3e9, key: []byte("default"), cost: 1},
		"0.2 k":          {t: 200e6, key: []byte("k"), cost: 1},
		" 1.5\tk,1\t7 ":  {t: 1500e6, key: []byte("k,1"), cost: 7},
		"0 #k 0":         {t: 0, key: []byte("#k"), cost: 0},
		"2 日本 1":         {t: 2e9, key: []byte("日本"), cost: 1},
		"1.000000001 \"": {t: 1e9 + 1, key: []byte(`"`), cost: 1},
	} {
		var req request
		ok, err := parseTraceLine([]byte(line), &req)
		require.NoError(t, err, "%q", line)
		if want == nil {
			assert.False(t, ok, "%q", line)
			continue
		}
		assert.True(t, ok, "%q", line)
		assert.Equal(t, *want, req, "%q", line)
	}
}

func TestLineReader(t *testing.T) {
	long := strings.Repeat("x", maxLine+1)
	lr := newLineReader(strings.NewReader("a\r\nb\n\n" + long + "\nc\r\r\nd"))
	var got []string
	for {
		line, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			assert.Equal(t, "line 4: longer than 65536 bytes", err.Error())
			got = append(got, "!")
			continue
		}
		got = append(got, string(line))
	}
	assert.Equal(t, []string{"a", "b", "", "!", "c\r", "d"}, got)
	assert.Equal(t, 6, lr.n)

	lr = newLineReader(strings.NewReader(strings.Repeat("y", maxLine) + "\n" + strings.Repeat("z", maxLine)))
	line, err := lr.next()
	require.NoError(t, err, "a line of maxLine bytes")
	assert.Len(t, line, maxLine)
	line, err = lr.next()
	require.NoError(t, err, "a last line of maxLine bytes, without a newline")
	assert.Len(t, line, maxLine)
}

// fuzzArgs are the flag sets the fuzz targets run with.
var fuzzArgs = [][]string{
	{"-format", "csv"},
	{"-format", "json", "-algorithm", "leaky-shape", "-start", "empty", "-rate", "3", "-burst", "2"},
	{"-format", "table", "-algorithm", "leaky-police", "-rate", "0.5", "-burst", "1", "-skip-bad"},
	{"-format", "csv", "-algorithm", "daily", "-burst", "3", "-tz", "Europe/Paris", "-t0", "2026-03-28T23:00:00", "-start", "empty"},
}

// checkRun runs ratesim on input and checks that it ends well: status 0
// with CSV that parses and one summary, or status 2 with an error that
// names a line.
func checkRun(t *testing.T, input string, args ...string) {
	stdout, stderr, code := runCLI(t, input, args...)
	switch code {
	case 0:
		assert.True(t, strings.HasPrefix(stderr, "ratesim: "), stderr)
		assert.Contains(t, strings.SplitN(stderr, "\n", 2)[0], " allowed, ")
		if args[1] == "csv" {
			_, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
			assert.NoError(t, err)
		}
	case 2:
		assert.Regexp(t, `^ratesim: line [1-9][0-9]*: .+\n$`, stderr)
	default:
		t.Fatalf("exit status %d, stderr %q", code, stderr)
	}
}

// FuzzTrace: whatever the trace, ratesim does not panic; it replays it or
// names the line it cannot read.
func FuzzTrace(f *testing.F) {
	for _, s := range []string{
		"", "3\n3\n3\n", "0\n0.2 k 3\n0.2 k 11\n", "# c\n\n1.000000001 a,b 0\r\n", "1\n0.5\n", "-1", ".", "0.0000000001",
		"1e3", "0 k 1 x", "0 k 99999999999999999999", "999999999.999999999 z 1", "\x00 \xff", "0 " + strings.Repeat("k", 100),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, trace string) {
		for _, args := range fuzzArgs {
			checkRun(t, trace, args...)
		}
		// The parser agrees with itself: a line it reads formats back to
		// a line that reads the same.
		for _, line := range strings.Split(trace, "\n") {
			var req request
			ok, err := parseTraceLine([]byte(line), &req)
			if err != nil || !ok {
				continue
			}
			again := formatSeconds(req.t) + " " + string(req.key) + " " + strconv.FormatInt(req.cost, 10)
			var req2 request
			ok2, err := parseTraceLine([]byte(again), &req2)
			require.NoError(t, err, again)
			require.True(t, ok2, again)
			require.Equal(t, req, req2, again)
		}
	})
}

// FuzzAccessLog: whatever the log, ratesim does not panic; it replays it or
// names the line it cannot read.
func FuzzAccessLog(f *testing.F) {
	f.Add(`127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)"`)
	f.Add(`::1 - - [01/Jan/2026:00:00:00 +0000] "GET /q?x=\"a b\" HTTP/1.1" 200 - "" "agent \"x\" \\"` + "\n" +
		`::1 - - [31/Dec/2025:23:59:59 +0000] "-" 408 - "-" "-"`)
	f.Add("1.2.3.4 - - [29/Feb/2023:00:00:00 +0000] \"GET\" 200 5\n")
	f.Add("a b c [10/Oct/2000:13:55:36 -0700 \"")
	f.Add("a b c [10/Oct/9999:13:55:36 -0700] \"\" 1 - \"\" \"\"\na b c [10/Oct/0000:13:55:36 +2359] \"\" 1 - \"\" \"\"")
	f.Fuzz(func(t *testing.T, log string) {
		for _, format := range []string{"common", "combined"} {
			for _, field := range []string{"host", "path", "user-agent"} {
				if field == "user-agent" && format == "common" {
					continue
				}
				checkRun(t, log, "-format", "csv", "-log", format, "-key-field", field)
			}
		}
		checkRun(t, log, "-format", "json", "-log", "combined", "-skip-bad", "-algorithm", "leaky-shape")
		checkRun(t, log, "-format", "csv", "-log", "combined", "-algorithm", "monthly", "-tz", "America/New_York")
	})
}
