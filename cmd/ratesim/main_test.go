package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// runCLI runs ratesim with args and stdin and returns what it wrote and its
// exit status.
func runCLI(t testing.TB, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), code
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create %s", path)
	assert.Equal(t, string(want), got, "output differs from %s (go test -update rewrites it)", path)
}

// lines returns n lines reading s.
func lines(s string, n int) string { return strings.Repeat(s+"\n", n) }

// The seed's exercise: refill 2/s, capacity 5, empty at time 0, ten
// requests at T = 3 s: five pass, five are refused.
func TestExercise(t *testing.T) {
	for _, format := range formats {
		t.Run(format, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, lines("3", 10), "-rate", "2", "-burst", "5", "-start", "empty", "-format", format)
			require.Equal(t, 0, code, stderr)
			assert.True(t, strings.HasPrefix(stderr, "ratesim: 10 requests: 5 allowed, 5 denied\n"), stderr)
			golden(t, "exercise."+format+".golden", stdout)
			golden(t, "exercise.stderr.golden", stderr)
		})
	}
}

// The design's worked example: 5/s, burst 10, twelve requests at once: ten
// pass, two are refused with 0.2 s to wait; one second later five pass.
func TestWorkedExample(t *testing.T) {
	trace := lines("0", 12) + lines("1", 6)
	for _, format := range formats {
		t.Run(format, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, trace, "-format", format)
			require.Equal(t, 0, code, stderr)
			golden(t, "worked."+format+".golden", stdout)
			golden(t, "worked.stderr.golden", stderr)
		})
	}
	stdout, _, _ := runCLI(t, trace, "-format", "csv")
	rows := parseCSV(t, stdout)
	var allowed0, denied0, allowed1 int
	for _, r := range rows {
		switch {
		case r["time"] == "0" && r["allowed"] == "true":
			allowed0++
		case r["time"] == "0":
			denied0++
			assert.Equal(t, "0.2", r["retry_after"])
		case r["allowed"] == "true":
			allowed1++
		}
	}
	assert.Equal(t, []int{10, 2, 5}, []int{allowed0, denied0, allowed1})
}

// The design's shaping example: twelve requests at once; the first runs
// now, ten wait 0.2 s … 2.0 s, the twelfth is refused.
func TestWorkedExampleShaping(t *testing.T) {
	stdout, stderr, code := runCLI(t, lines("0", 12), "-algorithm", "leaky-shape", "-format", "csv")
	require.Equal(t, 0, code, stderr)
	golden(t, "shape.csv.golden", stdout)
	rows := parseCSV(t, stdout)
	require.Len(t, rows, 12)
	for i, r := range rows[:11] {
		assert.Equal(t, "true", r["allowed"], "request %d", i+1)
		assert.Equal(t, formatSeconds(int64(i)*200e6), r["delay"], "request %d", i+1)
	}
	assert.Equal(t, "false", rows[11]["allowed"])
	assert.Equal(t, "0.2", rows[11]["retry_after"])
}

// With -start empty, a key first seen later has refilled since time 0.
func TestStartEmptyKeysSeenLater(t *testing.T) {
	trace := "0 a\n0.5 b\n0.5 b\n1 c\n1 c\n1 c\n10 d\n10 d\n10 d\n10 d\n10 d\n10 d\n"
	for _, alg := range []string{"token-bucket", "leaky-police"} {
		stdout, stderr, code := runCLI(t, trace, "-rate", "2", "-burst", "5", "-start", "empty", "-format", "csv", "-algorithm", alg)
		require.Equal(t, 0, code, stderr)
		assert.Equal(t, map[string][]string{
			"a": {"false"},                                         // no token at time 0
			"b": {"true", "false"},                                 // one token at 0.5 s
			"c": {"true", "true", "false"},                         // two at 1 s
			"d": {"true", "true", "true", "true", "true", "false"}, // full (5) at 10 s
		}, decisionsByKey(parseCSV(t, stdout)), alg)
	}
	// The shaping queue admits one more than the burst when it is empty
	// (one runs, Burst wait): empty means no room at time 0, and room for
	// one more every interval.
	stdout, stderr, code := runCLI(t, trace, "-rate", "2", "-burst", "5", "-start", "empty", "-format", "csv", "-algorithm", "leaky-shape")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, map[string][]string{
		"a": {"false"},
		"b": {"true", "false"},
		"c": {"true", "true", "false"},
		"d": {"true", "true", "true", "true", "true", "true"},
	}, decisionsByKey(parseCSV(t, stdout)))
}

func decisionsByKey(rows []map[string]string) map[string][]string {
	m := make(map[string][]string)
	for _, r := range rows {
		m[r["key"]] = append(m[r["key"]], r["allowed"])
	}
	return m
}

// A cost above the burst is refused by every algorithm, with no
// retry_after, and spends nothing.
func TestCostAboveBurst(t *testing.T) {
	for _, alg := range []string{"token-bucket", "leaky-police", "leaky-shape"} {
		stdout, stderr, code := runCLI(t, "0 k 11\n0 k 10\n", "-algorithm", alg, "-format", "csv")
		require.Equal(t, 0, code, stderr)
		rows := parseCSV(t, stdout)
		require.Len(t, rows, 2)
		assert.Equal(t, "false", rows[0]["allowed"], alg)
		assert.Equal(t, "0", rows[0]["retry_after"], alg)
		assert.Equal(t, "10", rows[0]["remaining"], alg)
		assert.Equal(t, "true", rows[1]["allowed"], alg)
	}
	stdout, _, _ := runCLI(t, "0 k 11\n")
	assert.Contains(t, stdout, "DENIED      11         10        never")
}

func TestComments(t *testing.T) {
	stdout, stderr, code := runCLI(t, "# header\n\n   \n  # indented\n\t0\tk\t2\r\n0.5 k # not a comment: 4 fields\n", "-format", "csv")
	assert.Equal(t, 2, code)
	assert.Equal(t, "ratesim: line 6: cost \"#\": not a whole number\n", stderr)
	assert.Equal(t, "time,key,cost,allowed,remaining,retry_after,delay,reset_after\n0,k,2,true,8,0,0,0.4\n", stdout,
		"the decisions before the error are written")
}

func TestTraceErrors(t *testing.T) {
	for _, tc := range []struct{ trace, want string }{
		{"0\nabc\n", `line 2: time "abc": not a decimal number of seconds`},
		{"1\n0.5\n", `line 2: time 0.5 is before the previous line's 1: times must not decrease`},
		{"-1\n", `line 1: time "-1": negative time`},
		{"+1\n", `line 1: time "+1": not a decimal number of seconds`},
		{"1e3\n", `line 1: time "1e3": not a decimal number of seconds`},
		{"0.0000000001\n", `line 1: time "0.0000000001": finer than a nanosecond`},
		{"1000000000.5\n", `line 1: time "1000000000.5": more than 1000000000 seconds`},
		{"99999999999999999999999\n", `line 1: time "99999999999999999999999": more than 1000000000 seconds`},
		{".\n", `line 1: time ".": not a decimal number of seconds`},
		{"0 k -1\n", `line 1: cost "-1": negative`},
		{"0 k 1.5\n", `line 1: cost "1.5": not a whole number`},
		{"0 k 99999999999999999999\n", `line 1: cost "99999999999999999999": too large`},
		{"0 k 1 x\n", `line 1: unexpected "x" after the cost: want TIME [KEY [COST]]`},
		{"1\r2\r3\n", `line 1: time "1\r2\r3": not a decimal number of seconds`}, // a bare CR ends no line
		{"# c\n\n0\n" + strings.Repeat("9", maxLine+1) + "\n1\n", `line 4: longer than 65536 bytes`},
	} {
		_, stderr, code := runCLI(t, tc.trace)
		assert.Equal(t, 2, code, "trace %.40q", tc.trace)
		assert.Equal(t, "ratesim: "+tc.want+"\n", stderr, "trace %.40q", tc.trace)
	}
}

func TestTraceFine(t *testing.T) {
	stdout, stderr, code := runCLI(t, "0.1000000000\n.5\n2.\n003 k 0\n1000000000\n", "-format", "csv")
	require.Equal(t, 0, code, stderr)
	var times []string
	for _, r := range parseCSV(t, stdout) {
		times = append(times, r["time"])
	}
	assert.Equal(t, []string{"0.1", "0.5", "2", "3", "1000000000"}, times)
}

func TestSkipBad(t *testing.T) {
	stdout, stderr, code := runCLI(t, "0\nx\n2\n1\n3 k -4\n3\n", "-skip-bad", "-format", "csv", "-top", "0")
	require.Equal(t, 0, code, stderr)
	assert.Len(t, parseCSV(t, stdout), 3)
	assert.Equal(t, "ratesim: 3 requests: 3 allowed, 0 denied\n"+
		"ratesim: skipped 3 malformed lines; the first: line 2: time \"x\": not a decimal number of seconds\n", stderr)
}

func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-rate", "0"}, "-rate 0: want a positive, finite number of tokens per second"},
		{[]string{"-rate", "-1"}, "-rate -1: want a positive, finite number"},
		{[]string{"-rate", "NaN"}, "-rate NaN: want a positive"},
		{[]string{"-rate", "1e-10"}, "-rate 1e-10: one token every 1e+10 s, more than 50 years"},
		{[]string{"-rate", "+Inf"}, "-rate +Inf: want a positive"},
		{[]string{"-rate", "1e10"}, "-rate 1e+10: more than one token per nanosecond"},
		{[]string{"-rate", "1e-12"}, "more than 50 years"},
		{[]string{"-rate", "x"}, `invalid value "x" for flag -rate`},
		{[]string{"-burst", "0"}, "-burst 0: want a capacity of at least 1"},
		{[]string{"-burst", "-3"}, "-burst -3: want a capacity of at least 1"},
		{[]string{"-algorithm", "gcra"}, `invalid value "gcra" for flag -algorithm: want token-bucket, leaky-police, leaky-shape, daily or monthly`},
		{[]string{"-start", "half"}, `invalid value "half" for flag -start: want full or empty`},
		{[]string{"-format", "xml"}, `invalid value "xml" for flag -format: want table, csv or json`},
		{[]string{"-log", "w3c"}, `invalid value "w3c" for flag -log: want common or combined`},
		{[]string{"-log", "common", "-key-field", "cookie"}, `invalid value "cookie" for flag -key-field`},
		{[]string{"-key-field", "host"}, "-key-field needs -log"},
		{[]string{"-log", "common", "-key-field", "user-agent"}, "-key-field user-agent needs -log combined"},
		{[]string{"-plot-key", "a"}, "-plot-key and -plot-top need -plot"},
		{[]string{"-plot-top", "2"}, "-plot-key and -plot-top need -plot"},
		{[]string{"-plot", "x.svg", "-plot-top", "0"}, "-plot-top 0: want at least 1"},
		{[]string{"-plot", "x.svg", "-plot-top", "2", "-plot-key", "a"}, "exclude each other"},
		{[]string{"-plot", "x.svg", "-plot-key", ""}, "empty key"},
		{[]string{"-top", "-1"}, "-top -1: want a number of keys"},
		{[]string{"a", "b"}, "want at most one TRACE file, got 2 arguments"},
		{[]string{"-nope"}, "flag provided but not defined: -nope"},
	} {
		stdout, stderr, code := runCLI(t, "0\n", tc.args...)
		assert.Equal(t, 2, code, "%q", tc.args)
		assert.Contains(t, stderr, tc.want, "%q", tc.args)
		assert.Empty(t, stdout, "%q", tc.args)
	}
	_, stderr, code := runCLI(t, "", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, stderr, "Usage: ratesim [flags] [TRACE]")
}

func TestIOErrors(t *testing.T) {
	dir := t.TempDir()
	_, stderr, code := runCLI(t, "", filepath.Join(dir, "missing.trace"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "missing.trace")

	_, stderr, code = runCLI(t, "0\n", "-plot", filepath.Join(dir, "no", "such", "dir.svg"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "dir.svg")

	var errOut bytes.Buffer
	code = run(nil, strings.NewReader(lines("0", 100000)), failingWriter{}, &errOut)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut.String(), "ratesim: writing the decisions: disk full")

	code = run(nil, failingReader{}, &bytes.Buffer{}, &errOut)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut.String(), "ratesim: reading standard input: device gone")
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("device gone") }

// A TRACE file and standard input ("-") read the same.
func TestTraceFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.trace")
	trace := lines("0", 12) + lines("1", 6)
	require.NoError(t, os.WriteFile(path, []byte(trace), 0o644))
	fromFile, _, code := runCLI(t, "", "-format", "csv", path)
	require.Equal(t, 0, code)
	fromStdin, _, code := runCLI(t, trace, "-format", "csv", "-")
	require.Equal(t, 0, code)
	assert.Equal(t, fromStdin, fromFile)
}

func TestEmptyInput(t *testing.T) {
	stdout, stderr, code := runCLI(t, "", "-format", "csv")
	assert.Equal(t, 0, code)
	assert.Equal(t, "time,key,cost,allowed,remaining,retry_after,delay,reset_after\n", stdout)
	assert.Equal(t, "ratesim: 0 requests: 0 allowed, 0 denied\n", stderr)
	stdout, _, _ = runCLI(t, "", "-format", "json")
	assert.Empty(t, stdout)
}
