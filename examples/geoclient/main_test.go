package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/tokenfair/ratelimit/pace"
)

// The tests run the client end to end, in-process through run, against the
// real demo server: the binary of examples/geocoding, built once with go
// build and started on a free loopback port for each test that needs one.
// They use the real clock, and wait only where the server's limits make
// the client wait.

// demoDir holds the demo's binary, once built.
var (
	demoOnce sync.Once
	demoDir  string
	demoBin  string
	demoErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if demoDir != "" {
		os.RemoveAll(demoDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// demo returns the path of the demo server's binary, building it the
// first time.
func demo(t *testing.T) string {
	t.Helper()
	demoOnce.Do(func() {
		if demoDir, demoErr = os.MkdirTemp("", "geoclient-test-"); demoErr != nil {
			return
		}
		demoBin = filepath.Join(demoDir, "geocoding")
		out, err := exec.Command("go", "build", "-o", demoBin, "../geocoding").CombinedOutput()
		if err != nil {
			demoErr = fmt.Errorf("go build ../geocoding: %v\n%s", err, out)
		}
	})
	require.NoError(t, demoErr)
	return demoBin
}

// listening matches the demo's start-up line.
var listening = regexp.MustCompile(`geocoding: listening on (http://\S+?)"?\s`)

// serverLog is the demo's standard error: it keeps what the server writes
// and sends its URL on addr once it listens.
type serverLog struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	addr chan string // buffered; sent to once
}

func (l *serverLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	found := listening.Match(l.buf.Bytes())
	l.buf.Write(p)
	if m := listening.FindSubmatch(l.buf.Bytes()); m != nil && !found {
		l.addr <- string(m[1])
	}
	return len(p), nil
}

func (l *serverLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// startDemo starts the demo server with args on a free loopback port,
// stops it (SIGTERM) when the test ends, and returns its URL.
func startDemo(t *testing.T, args ...string) string {
	t.Helper()
	log := &serverLog{addr: make(chan string, 1)}
	cmd := exec.Command(demo(t), append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	cmd.Stderr = log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("the demo server %v: %v; its log:\n%s", args, err, log)
		}
	})
	select {
	case url := <-log.addr:
		return url
	case <-time.After(30 * time.Second):
		t.Fatalf("the demo server %v did not listen within 30 s; its log:\n%s", args, log)
		return ""
	}
}

// result is what one run of the client wrote and returned.
type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

// geoclient runs the client with args and stdin.
func geoclient(stdin string, args ...string) result {
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := run(context.Background(), args, strings.NewReader(stdin), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String(), time.Since(start)}
}

// summaryLine matches the summary, the whole of standard error after any
// error lines.
var summaryLine = regexp.MustCompile(`(?m)^geoclient: (\d+) names, (\d+) ok, (\d+) not found, (\d+) refused \(429 seen\), (\d+) retries, waited (\d+\.\d) s\n\z`)

// counts are the figures of a summary line.
type counts struct {
	names, ok, notFound, refused, retries int
	waited                                float64
}

// summaryOf returns the figures of the summary that r ends with.
func summaryOf(t *testing.T, r result) counts {
	t.Helper()
	m := summaryLine.FindStringSubmatch(r.stderr)
	require.NotNil(t, m, "no summary line at the end of standard error:\n%s", r.stderr)
	n := make([]int, 5)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	waited, _ := strconv.ParseFloat(m[6], 64)
	return counts{n[0], n[1], n[2], n[3], n[4], waited}
}

// spend sends n requests for key to the demo at url without pacing, as
// another client of the same key would.
func spend(t *testing.T, url, key string, n int) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for range n {
		req, err := http.NewRequest("GET", url+"/geocode?q=paris", nil)
		require.NoError(t, err)
		req.Header.Set("X-API-Key", key)
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
}

// TestOutput: a line a name in the order given, the server's fields for a
// 200, its reason for a 404, and the summary line word for word; the
// client's connections are closed when it ends, the server still up.
func TestOutput(t *testing.T) {
	url := startDemo(t)
	before := goleak.IgnoreCurrent()
	r := geoclient("", "-url", url, "paris", "atlantis", "Tokyo", "new york")
	goleak.VerifyNone(t, before)
	assert.Equal(t, 0, r.code, "exit status; stderr:\n%s", r.stderr)
	assert.Equal(t, `{"query":"paris","status":200,"name":"Paris","lat":48.8566,"lon":2.3522}
{"query":"atlantis","status":404,"error":"unknown place"}
{"query":"Tokyo","status":200,"name":"Tokyo","lat":35.6762,"lon":139.6503}
{"query":"new york","status":200,"name":"New York","lat":40.7128,"lon":-74.006}
`, r.stdout)
	assert.Regexp(t, `^geoclient: 4 names, 3 ok, 1 not found, 0 refused \(429 seen\), 0 retries, waited 0\.0 s\n$`, r.stderr)
}

// TestStdinInOrder: without arguments the names are the lines of standard
// input, trimmed, blank ones skipped, and their lines come out in input
// order although 8 workers answer them in any order.
func TestStdinInOrder(t *testing.T) {
	url := startDemo(t, "-burst", "100")
	places := []string{"paris", "tokyo", "rome", "cairo", "london", "sydney", "atlantis", "berlin", "madrid", "nairobi"}
	var in strings.Builder
	var want []string
	for i := range 40 {
		name := places[i%len(places)]
		want = append(want, name)
		fmt.Fprintf(&in, "  %s\r\n", name)
		if i%7 == 0 {
			in.WriteString("\n \t\r\n")
		}
	}
	r := geoclient(in.String(), "-url", url, "-concurrency", "8")
	require.Equal(t, 0, r.code, "exit status; stderr:\n%s", r.stderr)
	var got []string
	query := regexp.MustCompile(`^\{"query":"([^"]*)","status":(200|404)[,}]`)
	for _, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		m := query.FindStringSubmatch(line)
		require.NotNil(t, m, "line %q", line)
		got = append(got, m[1])
	}
	assert.Equal(t, want, got, "queries in output order")
	assert.Equal(t, counts{names: 40, ok: 36, notFound: 4}, summaryOf(t, r))
}

// TestRetryAfter: a name refused with Retry-After is sent again after it,
// and the summary counts the 429, the retry and the wait.
func TestRetryAfter(t *testing.T) {
	url := startDemo(t)
	spend(t, url, "demo", 10)
	r := geoclient("", "-url", url, "-max-wait", "5s", "paris")
	assert.Equal(t, 0, r.code, "exit status; stderr:\n%s", r.stderr)
	assert.Equal(t, `{"query":"paris","status":200,"name":"Paris","lat":48.8566,"lon":2.3522}`+"\n", r.stdout)
	got := summaryOf(t, r)
	assert.Equal(t, counts{names: 1, ok: 1, refused: 1, retries: 1}, counts{got.names, got.ok, got.notFound, got.refused, got.retries, 0})
	// Retry-After: 1, a second less the time since the bucket was spent.
	assert.InDelta(t, 1.0, got.waited, 0.25, "waited")
}

// TestMaxWaitFailsAtOnce: a Retry-After longer than -max-wait fails the
// name at once, without waiting, naming the wait; the exit status is 1.
func TestMaxWaitFailsAtOnce(t *testing.T) {
	url := startDemo(t, "-rate", "0.01", "-burst", "1") // a token every 100 s
	spend(t, url, "demo", 1)
	r := geoclient("", "-url", url, "-max-wait", "2s", "paris")
	assert.Equal(t, 1, r.code, "exit status; stderr:\n%s", r.stderr)
	assert.Less(t, r.elapsed, time.Second, "it waited")
	assert.Regexp(t, `^\{"query":"paris","status":429,"error":"a wait of 1m(39\.\d+|40)s for the Retry-After of a 429 from 127\.0\.0\.1:\d+ is longer than the 2s left of -max-wait 2s"\}\n$`, r.stdout)
	assert.Equal(t, counts{names: 1, refused: 1}, summaryOf(t, r))

	// -max-wait 0: no wait at all.
	r = geoclient("", "-url", url, "-max-wait", "0", "rome")
	assert.Equal(t, 1, r.code)
	assert.Regexp(t, `^\{"query":"rome","status":429,"error":"a wait of 1m(39\.\d+|40)s for .* -max-wait 0s"\}\n$`, r.stdout)
}

// TestOwnLimit: -rate and -burst add a limit of the client's own: with
// -rate 2 -burst 1, five names take 2 s, one every 500 ms, and the client
// waited all that time; -rate alone has a burst of the rate.
func TestOwnLimit(t *testing.T) {
	url := startDemo(t, "-burst", "100")
	names := []string{"paris", "rome", "cairo", "london", "tokyo"}
	r := geoclient("", append([]string{"-url", url, "-rate", "2", "-burst", "1"}, names...)...)
	assert.Equal(t, 0, r.code, "exit status; stderr:\n%s", r.stderr)
	got := summaryOf(t, r)
	assert.Equal(t, 5, got.ok)
	assert.InDelta(t, 2.0, got.waited, 0.2, "waited")
	assert.InDelta(t, 2.0, r.elapsed.Seconds(), 0.3, "elapsed")

	r = geoclient("", append([]string{"-url", url, "-rate", "5"}, names...)...)
	assert.Equal(t, 0, r.code, "exit status; stderr:\n%s", r.stderr)
	assert.Equal(t, counts{names: 5, ok: 5}, summaryOf(t, r), "a burst of 5")
}

// TestFailures: a name that gets no answer, or an answer other than 200
// or 404, has its last status and why; the exit status is 1.
func TestFailures(t *testing.T) {
	url := startDemo(t)
	r := geoclient("", "-url", url, "-key", "", "paris")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, `{"query":"paris","status":401,"error":"the request carries no X-API-Key header"}`+"\n", r.stdout)
	assert.Equal(t, counts{names: 1}, summaryOf(t, r))

	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	r = geoclient("", "-url", refused, "paris", "rome")
	assert.Equal(t, 1, r.code)
	assert.Regexp(t, `^\{"query":"paris","status":0,"error":"dial tcp 127\.0\.0\.1:\d+: connect: connection refused"\}\n\{"query":"rome",`, r.stdout)
	assert.Equal(t, counts{names: 2}, summaryOf(t, r))
}

// TestBadFlags: exit status 2 and a message naming the flag, before any
// request; -h is the usage and 0.
func TestBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-concurrency", "0"}, "geoclient: -concurrency 0: want at least 1\n"},
		{[]string{"-rate", "-5"}, "geoclient: -rate -5: want requests per second, or 0 for no own limit\n"},
		{[]string{"-rate", "5", "-burst", "-1"}, "geoclient: -burst -1: want a capacity of at least 1, or 0 for -rate\n"},
		{[]string{"-burst", "3"}, "geoclient: -burst 3: needs -rate\n"},
		{[]string{"-max-wait", "soon"}, `invalid value "soon" for flag -max-wait: parse error` + "\n"},
		{[]string{"-max-wait", "-1s"}, "geoclient: -max-wait -1s: want a duration of 0 or more\n"},
		{[]string{"-url", "localhost:8080"}, `geoclient: -url "localhost:8080": want an http:// or https:// URL with a host` + "\n"},
		{[]string{"-rate", "2000000000"}, `geoclient: -rate 2000000000 -burst 0: ratelimit: policy "own": PerSecond(2000000000)`},
		{[]string{"-h"}, "Usage: go run ./examples/geoclient [flags] [NAME...]\n"},
		{[]string{"-no-such-flag"}, "flag provided but not defined: -no-such-flag\n"},
		{[]string{"-concurrency", "0", "-rate", "-1"}, "geoclient: -concurrency 0: want at least 1\ngeoclient: -rate -1: want requests per second, or 0 for no own limit\n"},
	} {
		r := geoclient("paris\n", c.args...)
		want := 2
		if c.args[0] == "-h" {
			want = 0
		}
		assert.Equal(t, want, r.code, "%v: exit status", c.args)
		assert.True(t, strings.HasPrefix(r.stderr, c.want), "%v: stderr = %q, want it to start with %q", c.args, r.stderr, c.want)
		assert.Empty(t, r.stdout, "%v: stdout", c.args)
	}
}

// TestDemoFieldsRead: the fields the demo writes in each of its formats,
// read back by pace.Read as the decisions that made them: 10 at once of
// a bucket of 10 refilled 5 a second, then a refusal.
func TestDemoFieldsRead(t *testing.T) {
	for _, format := range []string{"ietf", "legacy", "x"} {
		t.Run(format, func(t *testing.T) {
			url := startDemo(t, "-headers", format)
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			for i := int64(1); i <= 11; i++ {
				req, err := http.NewRequest("GET", url+"/geocode?q=paris", nil)
				require.NoError(t, err)
				req.Header.Set("X-API-Key", "demo")
				resp, err := client.Do(req)
				require.NoError(t, err)
				resp.Body.Close()
				got, ok := pace.Read(resp.Header, time.Now())
				require.True(t, ok, "answer %d: Read(%v)", i, resp.Header)
				want := pace.Quota{Remaining: max(10-i, 0), Limit: 10, Unit: "requests"}
				if format == "ietf" {
					// t: until the next token (on a refusal, Retry-After).
					want.Policy, want.Window, want.Reset = "default", 2*time.Second, time.Second
				} else {
					// The reset: until the bucket is full, rounded up.
					want.Reset = time.Duration((min(i, 10)*200+999)/1000) * time.Second
				}
				assert.Equal(t, want, got, "answer %d: Read(%v)", i, resp.Header)
				if i == 11 {
					assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
					d, ok := pace.RetryAfter(resp.Header, time.Now())
					assert.True(t, ok, "RetryAfter(%v)", resp.Header)
					assert.Equal(t, time.Second, d, "RetryAfter(%v)", resp.Header)
				}
			}
		})
	}
}
