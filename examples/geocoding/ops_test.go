package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMetricsEndToEnd scrapes /metrics from a real demo server after a
// known sequence of requests and finds the exact counts.
func TestMetricsEndToEnd(t *testing.T) {
	base := startServer(t, "-rate", "0.01", "-burst", "3", "-dry-run=false")
	get := func(path, key string) int { return getStatus(t, base+path, key) }
	for range 5 {
		get("/geocode?q=paris", "alice") // 3 allowed, 2 limited
	}
	get("/geocode?q=paris", "bob") // allowed
	get("/geocode?q=paris", "")    // no key: invalid
	for range 3 {
		assert.Equal(t, 200, get("/healthz", ""))
		assert.Equal(t, 200, get("/metrics", ""), "never limited")
	}

	assert.Equal(t, map[string]string{
		`ratelimit_decisions_total{outcome="allowed",policy="default"}`: "4",
		`ratelimit_decisions_total{outcome="limited",policy="default"}`: "2",
		`ratelimit_decisions_total{outcome="invalid",policy="default"}`: "1",
	}, scrape(t, base, "ratelimit_decisions_total{"))
	http.DefaultClient.CloseIdleConnections()
}

// startServer runs the demo on a free loopback port until the test ends
// and returns its base URL.
func startServer(t *testing.T, args ...string) string {
	t.Helper()
	base, _ := startServerLog(t, args...)
	return base
}

// getStatus sends GET url, with key as the API key unless it is empty, and
// returns the status.
func getStatus(t *testing.T, url, key string) int {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// scrape reads base's /metrics, in the text format, and returns the value
// of each series whose line starts with prefix, by its name and labels.
func scrape(t *testing.T, base, prefix string) map[string]string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
	got := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, prefix) {
			name, value, _ := strings.Cut(line, " ")
			got[name] = value
		}
	}
	require.NoError(t, sc.Err())
	return got
}

// startServerLog is startServer that also returns the server's log.
func startServerLog(t *testing.T, args ...string) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), io.Discard, stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("the server did not stop")
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, rest, ok := strings.Cut(stderr.String(), "listening on "); ok {
			return strings.TrimSuffix(strings.Fields(rest)[0], `"`), stderr
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("the server did not start: %s", stderr.String())
	return "", nil
}

func TestSkipPath(t *testing.T) {
	h, _ := newTestHandler(t, "-burst", "1", "-skip-path", "/geocode")
	for range 5 {
		w := serve(h, request{target: "/geocode?q=paris", apiKey: "a"})
		assert.Equal(t, 200, w.Code)
		assert.Empty(t, field(w.Header(), "RateLimit"), "skipped: no header fields")
	}
	assert.Equal(t, []int{404, 429}, statuses(h, request{target: "/other", apiKey: "a"}, 2), "other paths are limited")
}

// TestCountFailed: with -count failed, only failed answers (unknown places)
// spend the budget.
func TestCountFailed(t *testing.T) {
	h, _ := newTestHandler(t, "-burst", "2", "-count", "failed")
	found := request{target: "/geocode?q=paris", apiKey: "a"}
	unknown := request{target: "/geocode?q=atlantis", apiKey: "a"}
	assert.Equal(t, repeat(200, 10), statuses(h, found, 10))
	assert.Equal(t, []int{404, 404, 429}, statuses(h, unknown, 3))
	assert.Equal(t, 429, serve(h, found).Code, "the budget is spent")

	h, _ = newTestHandler(t, "-burst", "2", "-count", "successful")
	assert.Equal(t, repeat(404, 10), statuses(h, unknown, 10))
	assert.Equal(t, []int{200, 200, 429}, statuses(h, found, 3))
}

// TestWarningsCounted: the library's misconfiguration warnings are counted
// in ratelimit_warnings_total, KeyByIP's as well as the middleware's.
func TestWarningsCounted(t *testing.T) {
	h, _ := newTestHandler(t, "-key", "ip")
	for i := range 400 { // 400 clients, all forwarded
		w := serve(h, request{target: "/geocode?q=paris", remoteAddr: fmt.Sprintf("10.0.%d.%d:1234", i/200, i%200), forwardedFor: "203.0.113.7"})
		require.Equal(t, 200, w.Code)
	}
	w := serve(h, request{target: "/metrics"})
	require.Equal(t, 200, w.Code)
	assert.Contains(t, w.Body.String(), `ratelimit_warnings_total{kind="forwarded-without-trusted-proxy"} 1`+"\n", "once, however many requests")
}
