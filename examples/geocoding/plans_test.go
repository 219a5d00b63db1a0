package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// writePlans writes content to the plans file at path, in place.
func writePlans(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
}

// plansFile returns the path of a new plans file holding content.
func plansFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plans.json")
	writePlans(t, path, content)
	return path
}

// policyOf returns the RateLimit-Policy field of a GET /geocode of apiKey.
func policyOf(h http.Handler, apiKey string) string {
	return field(serve(h, request{target: "/geocode?q=paris", apiKey: apiKey}).Header(), "RateLimit-Policy")
}

// plansHandler is newHandlerWith for -plans path and args, the file
// looked at every poll and the log written to log.
func plansHandler(t *testing.T, path string, poll time.Duration, log io.Writer, args ...string) http.Handler {
	t.Helper()
	h, _ := newHandlerWith(t, func(c *config) {
		c.planPoll = poll
		c.logHandler = slog.NewTextHandler(log, nil)
	}, append([]string{"-plans", path}, args...)...)
	return h
}

// TestPlans: a plan gives its key its own rate, burst and quotas, a
// missing field takes the flag's value, and a key without a plan has the
// flags' limits, without the quota that no flag sets.
func TestPlans(t *testing.T) {
	path := plansFile(t, `{
  "gold":   {"rate": 100, "burst": 50, "daily": 3},
  "silver": {"burst": 20, "monthly": 1000},
  "free":   {"daily": 0}
}`)
	h := plansHandler(t, path, 0, io.Discard, "-daily", "0")
	assert.Equal(t, `"default";q=50;w=1,"daily";q=3;w=86400`, policyOf(h, "gold"))
	assert.Equal(t, `"default";q=20;w=4,"monthly";q=1000;w=2678400`, policyOf(h, "silver"))
	assert.Equal(t, `"default";q=10;w=2`, policyOf(h, "free"))
	assert.Equal(t, `"default";q=10;w=2`, policyOf(h, "nobody"))
	gold := request{target: "/geocode?q=paris", apiKey: "gold"}
	w := serve(h, gold)
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, []int{200, 429}, statuses(h, gold, 2), "the third of gold's day was spent by policyOf")
	assert.Equal(t, []any{"daily"}, decode(t, serve(h, gold))["violated-policies"])

	h = plansHandler(t, path, 0, io.Discard, "-daily", "7")
	assert.Equal(t, `"default";q=10;w=2,"daily";q=7;w=86400`, policyOf(h, "nobody"), "the flag's quota")
	assert.Equal(t, `"default";q=20;w=4,"daily";q=7;w=86400,"monthly";q=1000;w=2678400`, policyOf(h, "silver"))
	assert.Equal(t, `"default";q=10;w=2`, policyOf(h, "free"), "daily 0: none")
}

// TestPlansFollowFile: the server reads the plans file again within a
// second of a change, in place or by a rename over it, and a key's next
// request follows its new plan, into a limiter with a quota too.
func TestPlansFollowFile(t *testing.T) {
	path := plansFile(t, `{"alice": {"burst": 20}}`)
	h := plansHandler(t, path, 0, io.Discard) // the server's poll
	require.Equal(t, `"default";q=20;w=4`, policyOf(h, "alice"))

	follows := func(want, why string) {
		t.Helper()
		start := time.Now()
		assert.Eventually(t, func() bool { return policyOf(h, "alice") == want }, time.Second, 10*time.Millisecond, why)
		t.Logf("%s: followed in %v", why, time.Since(start).Round(time.Millisecond))
	}
	writePlans(t, path, `{"alice": {"burst": 300}}`)
	follows(`"default";q=300;w=60`, "edited in place")

	next := filepath.Join(filepath.Dir(path), "plans.json.new")
	writePlans(t, next, `{"alice": {"burst": 40, "daily": 5}}`)
	require.NoError(t, os.Rename(next, path))
	follows(`"default";q=40;w=8,"daily";q=5;w=86400`, "replaced by a rename")
	assert.Equal(t, `"default";q=10;w=2`, policyOf(h, "bob"))
}

// TestPlansSIGHUP: SIGHUP makes the server read the file again at once,
// changed or not (here it never looks on its own).
func TestPlansSIGHUP(t *testing.T) {
	path := plansFile(t, `{"alice": {"burst": 20}}`)
	h := plansHandler(t, path, time.Hour, io.Discard)
	require.Equal(t, `"default";q=20;w=4`, policyOf(h, "alice"))
	writePlans(t, path, `{"alice": {"burst": 30}}`)
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGHUP))
	assert.Eventually(t, func() bool { return policyOf(h, "alice") == `"default";q=30;w=6` }, time.Second, 10*time.Millisecond)
}

// TestPlansBadReread: a file that became invalid is refused whole and
// logged with its line; the plans last read stay until a valid one.
func TestPlansBadReread(t *testing.T) {
	path := plansFile(t, `{"alice": {"burst": 20}, "bob": {"burst": 20}}`)
	var log syncBuffer
	h := plansHandler(t, path, time.Millisecond, &log)
	writePlans(t, path, "{\n  \"alice\": {\"burst\": 30},\n  \"bob\": {\"rate\": -1}\n}")
	want := path + `:3: key \"bob\": rate -1: want a positive, finite number of tokens per second`
	require.Eventually(t, func() bool { return strings.Contains(log.String(), want) }, time.Second, time.Millisecond, "log:\n%s", &log)
	assert.Contains(t, log.String(), "level=ERROR")
	assert.Equal(t, `"default";q=20;w=4`, policyOf(h, "alice"), "the plans last read")
	assert.Equal(t, `"default";q=20;w=4`, policyOf(h, "bob"))

	writePlans(t, path, `{"alice": {"burst": 30}}`)
	assert.Eventually(t, func() bool { return policyOf(h, "alice") == `"default";q=30;w=6` }, time.Second, time.Millisecond)
	assert.Equal(t, `"default";q=10;w=2`, policyOf(h, "bob"), "no plan: the flags")
	assert.Equal(t, 1, strings.Count(log.String(), want), "logged once")
}

// TestPlanChangeKeepsSpent: a quota keeps what the key spent in the
// period when its plan changes.
func TestPlanChangeKeepsSpent(t *testing.T) {
	path := plansFile(t, `{"alice": {"daily": 5}}`)
	var log syncBuffer
	h := plansHandler(t, path, time.Millisecond, &log)
	alice := request{target: "/geocode?q=paris", apiKey: "alice"}
	require.Equal(t, repeat(200, 3), statuses(h, alice, 3))
	writePlans(t, path, `{"alice": {"daily": 10}}`)
	require.Eventually(t, func() bool { return strings.Contains(log.String(), "read again") }, time.Second, time.Millisecond)
	assert.Equal(t, append(repeat(200, 7), 429), statuses(h, alice, 8), "3 of 10 spent")
}

// TestPlansBadFile: a file that does not parse, or holds an invalid
// value, is refused at start-up with the exit status 2, naming the line,
// and the key and the value at fault.
func TestPlansBadFile(t *testing.T) {
	for _, tc := range []struct{ content, want string }{
		{"{\n  \"alice\": {\"rate\": 5,}\n}", `:2: invalid character '}' looking for beginning of object key string`},
		{"{\n  \"alice\": {\"burst\": 20},\n  \"bob\": {\"rat\": 5}\n}", `:3: key "bob": unknown field "rat": want rate, burst, daily or monthly`},
		{`{"alice": {"rate": 0}}`, `:1: key "alice": rate 0: want a positive, finite number of tokens per second`},
		{`{"alice": {"rate": "fast"}}`, `:1: key "alice": rate "fast": want a number`},
		{`{"alice": {"burst": 0}}`, `:1: key "alice": burst 0: want a capacity of at least 1, a whole number`},
		{`{"alice": {"burst": 1.5}}`, `:1: key "alice": burst 1.5: want a capacity of at least 1, a whole number`},
		{`{"alice": {"daily": -1}}`, `:1: key "alice": daily -1: want a quota of 1 to 1000000000000 requests, a whole number, or 0 for none`},
		{`{"alice": {"monthly": 1000000000001}}`, `:1: key "alice": monthly 1000000000001: want a quota of 1 to 1000000000000 requests`},
		{`{"alice": {"rate": 1e-9}}`, `:1: key "alice": rate 1e-09 burst 10: an empty bucket would take 317 years to fill, more than 50`},
		{`{"alice": {"rate": 3e8}}`, `:1: key "alice": rate 3e+08 burst 10: ratelimit: policy "default": PerSecond(300000000).WithBurst(10): a token every 3ns is more than 0.1% off the rate`},
		{"{\n\"alice\": {},\n\"alice\": {}\n}", `:3: key "alice": already given at line 2`},
		{"{\n\"alice\": {},\n\" alice \": {}\n}", `:3: key " alice ": the same API key as "alice", at line 2`},
		{`{"": {}}`, `:1: key "": not an API key`},
		{`{"alice": 5}`, `:1: key "alice": want an object of rate, burst, daily and monthly`},
		{`[{"alice": {}}]`, `:1: want a JSON object of plans by API key`},
		{`{"alice": {}} {}`, `:1: unexpected data after the object of plans`},
		{``, `:1: unexpected end of the file`},
		{"{\n\"alice\": {\n", `:2: unexpected end of the file`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			path := plansFile(t, tc.content)
			code, stderr := runExit(t, "-plans", path)
			assert.Equal(t, 2, code)
			assert.Contains(t, stderr, "geocoding: -plans: "+path+tc.want)
			assert.NotContains(t, stderr, "listening")
		})
	}
}

// TestPlansErrorLines: every kind of fault in the -plans file is named
// at its line, at start-up and on a reread alike: syntax errors anywhere
// on a line, at its start, or on a newline that ends it; the end of the
// file; invalid values, named at the line of the field or of the key; on
// the first line and on the last; with CRLF line endings too.
func TestPlansErrorLines(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		line          int
		msg           string
	}{
		// Syntax.
		{"syntax mid-line", "{\n  \"tin\": {\"rate\": 1, \"burst\": 5},\n  \"tin2\": {\"burst\": oops}\n}\n",
			3, `invalid character 'o' looking for beginning of value`},
		{"syntax far down", "{\n  \"a\": {\"rate\": 1, \"burst\": 5},\n  \"b\": {\"rate\": 2, \"burst\": 5},\n" +
			"  \"c\": {\"rate\": 3, \"burst\": 5},\n  \"d\": {\"rate\": 4, \"burst\": 5},\n  \"e\": {\"rate\": 5, \"burst\": 5},\n" +
			"  \"tin\": {\"daily\": 100, \"burst\": oops}\n}\n",
			7, `invalid character 'o' looking for beginning of value`},
		{"syntax at the start of a line", "{\n  \"alice\": {\"burst\": 1}\n\"bob\": {}\n}\n",
			3, `invalid character '"' after object key:value pair`},
		{"trailing comma, brace at the start of a line", "{\n  \"alice\": {\"burst\": 1},\n}\n",
			3, `invalid character '}' looking for beginning of object key string`},
		{"newline in a string", "{\n  \"alice\": {\"rate\": \"fa\nst\"}\n}\n",
			2, `invalid character '\n' in string`},
		{"syntax on the first line", "{\"alice\" {}}\n",
			1, `invalid character '{' after object key`},
		{"syntax on the last line", "{\n  \"alice\": {}\n]",
			3, `invalid character ']' after object key:value pair`},
		// The end of the file.
		{"end of file", "{\n  \"alice\": {\n",
			2, `unexpected end of the file`},
		{"end of file in a string", "{\n  \"alice\": {\"rate\": \"fa",
			2, `unexpected end of the file`},
		{"end of file after blank lines", "{\n  \"alice\": {}\n\n\n",
			4, `unexpected end of the file`},
		{"empty file", "",
			1, `unexpected end of the file`},
		// Values.
		{"wrong type", "{\n  \"alice\": {},\n  \"bob\": {\"rate\": \"fast\"}\n}\n",
			3, `key "bob": rate "fast": want a number`},
		{"plan not an object", "{\n  \"alice\": {},\n  \"bob\": [5]\n}\n",
			3, `key "bob": want an object of rate, burst, daily and monthly`},
		{"plans not an object", "\n\n[{\"alice\": {}}]\n",
			3, `want a JSON object of plans by API key`},
		{"unknown field", "{\n  \"alice\": {\n    \"burst\": 20,\n    \"rat\": 5\n  }\n}\n",
			4, `key "alice": unknown field "rat": want rate, burst, daily or monthly`},
		{"rate not positive", "{\n  \"alice\": {\n    \"rate\": 0,\n    \"burst\": 5\n  }\n}\n",
			3, `key "alice": rate 0: want a positive, finite number of tokens per second`},
		{"burst not positive", "{\n  \"alice\": {\"rate\": 1},\n  \"bob\": {\"burst\": -2}\n}\n",
			3, `key "bob": burst -2: want a capacity of at least 1, a whole number`},
		{"negative daily", "{\n  \"alice\": {},\n  \"bob\": {\n    \"daily\": -1\n  }\n}\n",
			4, `key "bob": daily -1: want a quota of 1 to 1000000000000 requests, a whole number, or 0 for none`},
		{"monthly not whole", "{\n  \"alice\": {},\n  \"bob\": {\"monthly\": 1.5}\n}\n",
			3, `key "bob": monthly 1.5: want a quota of 1 to 1000000000000 requests, a whole number, or 0 for none`},
		{"rate and burst apart, at the key", "{\n  \"alice\": {},\n  \"bob\": {\n    \"rate\": 1e-9\n  }\n}\n",
			3, `key "bob": rate 1e-09 burst 10: an empty bucket would take 317 years to fill`},
		{"duplicate key", "{\n  \"alice\": {},\n\n  \"alice\": {}\n}\n",
			4, `key "alice": already given at line 2`},
		{"the same API key", "{\n  \"alice\": {},\n  \" alice \": {}\n}\n",
			3, `key " alice ": the same API key as "alice", at line 2`},
		{"value on the first line", `{"alice": {"burst": 0}}`,
			1, `key "alice": burst 0: want a capacity of at least 1, a whole number`},
		{"value on the last line", "{\n  \"alice\": {},\n  \"bob\": {\"daily\": -1}}",
			3, `key "bob": daily -1: want a quota of 1 to 1000000000000 requests`},
		{"data after the plans, on the last line", "{\n  \"alice\": {}\n}\n\n{}",
			5, `unexpected data after the object of plans`},
		// CRLF.
		{"CRLF syntax mid-line", "{\r\n  \"tin\": {\"rate\": 1, \"burst\": 5},\r\n  \"tin2\": {\"burst\": oops}\r\n}\r\n",
			3, `invalid character 'o' looking for beginning of value`},
		{"CRLF syntax at the start of a line", "{\r\n  \"alice\": {}\r\n\"bob\": {}\r\n}\r\n",
			3, `invalid character '"' after object key:value pair`},
		{"CRLF in a string", "{\r\n  \"alice\": {\"rate\": \"fa\r\nst\"}\r\n}\r\n",
			2, `invalid character '\r' in string`},
		{"CRLF end of file", "{\r\n  \"alice\": {\r\n",
			2, `unexpected end of the file`},
		{"CRLF unknown field", "{\r\n  \"alice\": {},\r\n  \"bob\": {\"rat\": 1}\r\n}\r\n",
			3, `key "bob": unknown field "rat"`},
		{"CRLF rate not positive", "{\r\n  \"alice\": {\r\n    \"burst\": 5,\r\n    \"rate\": -1\r\n  }\r\n}\r\n",
			4, `key "alice": rate -1: want a positive, finite number of tokens per second`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := fmt.Sprintf(":%d: %s", tc.line, tc.msg)
			assertStartupError(t, tc.content, want)
			assertRereadError(t, tc.content, want)
		})
	}
}

// assertStartupError asserts that the server does not start with content
// as its -plans file: exit status 2, and the error want after the file's
// name.
func assertStartupError(t *testing.T, content, want string) {
	t.Helper()
	path := plansFile(t, content)
	code, stderr := runExit(t, "-plans", path)
	assert.Equal(t, 2, code, "stderr:\n%s", stderr)
	assert.Contains(t, stderr, "geocoding: -plans: "+path+want)
}

// assertRereadError asserts that a server whose -plans file becomes
// content logs the error want after the file's name, and keeps the plans
// last read.
func assertRereadError(t *testing.T, content, want string) {
	t.Helper()
	path := plansFile(t, `{"alice": {"burst": 20}}`)
	var log syncBuffer
	h := plansHandler(t, path, time.Millisecond, &log)
	writePlans(t, path, content)
	quoted := strconv.Quote(path + want) // as the text log writes the error
	quoted = quoted[1 : len(quoted)-1]
	assert.Eventually(t, func() bool { return strings.Contains(log.String(), quoted) }, time.Second, time.Millisecond,
		"want %s in the log:\n%s", quoted, &log)
	assert.Equal(t, `"default";q=20;w=4`, policyOf(h, "alice"), "the plans last read")
}

// TestPlansWatcherStops: the watcher of the file stops with the server.
func TestPlansWatcherStops(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var cfg config
	fs := newFlagSet(&cfg)
	fs.SetOutput(io.Discard)
	require.NoError(t, fs.Parse([]string{"-plans", plansFile(t, `{"alice": {}}`)}))
	cfg.planPoll = time.Millisecond
	_, cleanup, err := newHandler(cfg)
	require.NoError(t, err)
	cleanup()
}

// TestPlansRun: the server reads the plans before it listens, and stops
// its watcher when it stops.
func TestPlansRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stdout bytes.Buffer
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-plans", plansFile(t, `{"alice": {}}`)}, &stdout, &stderr)
	}()
	require.Eventually(t, func() bool { return listeningRE.MatchString(stderr.String()) }, 5*time.Second, 10*time.Millisecond)
	cancel()
	assert.Equal(t, 0, <-done, "stderr:\n%s", &stderr)
}

// TestPlansAdminReset: the admin reset forgets a key's quotas too, those
// of its plan included, which the flags do not set.
func TestPlansAdminReset(t *testing.T) {
	path := plansFile(t, `{"alice": {"daily": 2, "monthly": 3}}`)
	h, clock := newHandlerWith(t, nil, "-plans", path, "-admin-token", adminToken)
	alice := request{target: "/geocode?q=paris", apiKey: "alice"}
	require.Equal(t, []int{200, 200, 429}, statuses(h, alice, 3))
	require.Equal(t, http.StatusNoContent, adminReset(h, "POST", "alice", "Bearer "+adminToken).Code)
	assert.Equal(t, []int{200, 200, 429}, statuses(h, alice, 3), "the day's 2, and 2 of the month's 3")
	clock.Advance(24 * time.Hour)
	assert.Equal(t, []int{200, 429}, statuses(h, alice, 2), "the month's third")
	assert.Equal(t, []any{"monthly"}, decode(t, serve(h, alice))["violated-policies"])
}
