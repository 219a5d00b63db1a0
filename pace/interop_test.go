package pace_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit/pace"
)

// expressServer is a Node server of express-rate-limit's, one limiter per
// header mode and use: GET /MODE/read and /MODE/pace, each its own fixed
// window of LIMIT requests per WINDOW_MS milliseconds, keyed by client IP.
const expressServer = `
const express = require('express');
const { rateLimit } = require('express-rate-limit');
const [limit, windowMs] = process.argv.slice(2).map(Number);
const modes = {
	'draft-6': { standardHeaders: 'draft-6', legacyHeaders: false },
	'draft-7': { standardHeaders: 'draft-7', legacyHeaders: false },
	'draft-8': { standardHeaders: 'draft-8', legacyHeaders: false },
	'legacy': { standardHeaders: false, legacyHeaders: true },
};
const app = express();
for (const [mode, headers] of Object.entries(modes)) {
	for (const use of ['read', 'pace']) {
		app.get('/' + mode + '/' + use, rateLimit({ windowMs, limit, ...headers }), (req, res) => res.json({ mode }));
	}
}
const server = app.listen(0, '127.0.0.1', () => console.log('listening on 127.0.0.1:' + server.address().port));
`

// startExpress installs express and express-rate-limit with npm in a
// temporary folder and starts the server on a loopback port, with limit
// requests a window; it skips the test where Node or the npm registry is
// not at hand. It returns the server's base URL.
func startExpress(t *testing.T, limit, windowMs string) string {
	t.Helper()
	node, errNode := exec.LookPath("node")
	npm, errNpm := exec.LookPath("npm")
	if errNode != nil || errNpm != nil {
		t.Skip("node and npm are not both on PATH: skipping the interop test against express-rate-limit")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "--fetch-retries=1", "express", "express-rate-limit")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		t.Logf("npm install's output:\n%s", out)
		t.Skipf("npm install express express-rate-limit failed (%v): is the npm registry reachable? Skipping the interop test", err)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "server.js"), []byte(expressServer), 0o644))
	cmd := exec.Command(node, "server.js", limit, windowMs)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	stop := func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
	first := make(chan string, 1) // the server's first line, "listening on ADDR"
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		first <- line
	}()
	var line string
	select {
	case line = <-first:
		if addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on "); ok {
			t.Cleanup(stop)
			return "http://" + addr
		}
	case <-time.After(30 * time.Second):
	}
	stop()
	t.Fatalf("the express server did not start (its first line: %q); its standard error:\n%s", line, &stderr)
	return ""
}

// counted is a base transport that counts the 429s it receives.
type counted struct {
	refused atomic.Int64
}

func (c *counted) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		c.refused.Add(1)
	}
	return resp, err
}

// TestExpressRateLimit: against express-rate-limit (Node), in each of its
// header modes, Read parses what it sends, and the Transport paces to it:
// 4 goroutines sending 15 requests at a limit of 5 every 2 s get no 429
// (at most one) and take what the fixed windows allow, two more windows
// after the first, 4 s; up to 6 s, as the modes' whole seconds round up
// (the X- reset, a Unix time taken from the Date field's whole second, by
// up to a second a window). The modes run side by side.
func TestExpressRateLimit(t *testing.T) {
	url := startExpress(t, "5", "2000")
	sum := sha256.Sum256([]byte("127.0.0.1"))
	modes := []struct {
		name  string
		want  pace.Quota
		reset []time.Duration // the resets Read may find
	}{
		{"draft-6", pace.Quota{Remaining: 4, Limit: 5, Window: 2 * time.Second, Unit: "requests"}, []time.Duration{2 * time.Second}},
		{"draft-7", pace.Quota{Remaining: 4, Limit: 5, Window: 2 * time.Second, Unit: "requests"}, []time.Duration{2 * time.Second}},
		{"draft-8", pace.Quota{Policy: "5-in-2sec", Remaining: 4, Limit: 5, Window: 2 * time.Second, Unit: "requests",
			Partition: hex.EncodeToString(sum[:])[:12]}, []time.Duration{2 * time.Second}},
		{"legacy", pace.Quota{Remaining: 4, Limit: 5, Unit: "requests"}, []time.Duration{2 * time.Second, 3 * time.Second}},
	}
	plain := &http.Client{Transport: &http.Transport{}}
	defer plain.CloseIdleConnections()
	for _, m := range modes {
		resp, err := plain.Get(url + "/" + m.name + "/read")
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		got, ok := pace.Read(resp.Header, time.Now())
		assert.True(t, ok, "%s: Read(%v)", m.name, resp.Header)
		assert.Contains(t, m.reset, got.Reset, "%s: Read(%v).Reset", m.name, resp.Header)
		got.Reset = 0
		assert.Equal(t, m.want, got, "%s: Read(%v)", m.name, resp.Header)
	}

	type run struct {
		statuses map[int]int
		refused  int64
		elapsed  time.Duration
	}
	runs := make([]run, len(modes))
	var wg sync.WaitGroup
	for i, m := range modes {
		wg.Go(func() {
			base := &counted{}
			client := &http.Client{Transport: pace.New(base, nil)}
			requests := make(chan int, 15)
			for i := range 15 {
				requests <- i
			}
			close(requests)
			var mu sync.Mutex
			statuses := map[int]int{}
			start := time.Now()
			var workers sync.WaitGroup
			for range 4 {
				workers.Go(func() {
					for range requests {
						code, err := get(client, url+"/"+m.name+"/pace")
						if err != nil {
							t.Errorf("%s: %v", m.name, err)
						}
						mu.Lock()
						statuses[code]++
						mu.Unlock()
					}
				})
			}
			workers.Wait()
			runs[i] = run{statuses, base.refused.Load(), time.Since(start)}
		})
	}
	wg.Wait()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	for i, m := range modes {
		r := runs[i]
		t.Logf("%s: 15 requests in %v, answers %v, 429s seen %d", m.name, r.elapsed.Round(time.Millisecond), r.statuses, r.refused)
		assert.Equal(t, map[int]int{http.StatusOK: 15}, r.statuses, "%s: answers", m.name)
		assert.LessOrEqual(t, r.refused, int64(1), "%s: 429s seen", m.name)
		assert.GreaterOrEqual(t, r.elapsed, 4*time.Second-50*time.Millisecond, "%s: elapsed", m.name)
		assert.LessOrEqual(t, r.elapsed, 6*time.Second+500*time.Millisecond, "%s: elapsed", m.name)
	}
}
