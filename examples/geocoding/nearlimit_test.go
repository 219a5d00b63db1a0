package main

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNearLimitEndToEnd scrapes /metrics from a real demo server and finds
// the exact number of decisions that left each policy fewer than a fifth
// of its burst: with -burst 10, those that leave 1 or 0 tokens; with
// -global-burst 20, those that leave 3 to 0. A token every 100 s: no
// refill during the test.
func TestNearLimitEndToEnd(t *testing.T) {
	base := startServer(t, "-rate", "0.01", "-burst", "10", "-global-rate", "0.01", "-global-burst", "20")
	get := func(key string) int {
		req, err := http.NewRequest("GET", base+"/geocode?q=paris", nil)
		require.NoError(t, err)
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	statuses := func(key string, n int) []int {
		var got []int
		for range n {
			got = append(got, get(key))
		}
		return got
	}
	// alice: 9 to 0 left (1 and 0 near), then refused; global 19 to 10.
	assert.Equal(t, append(repeat(200, 10), 429, 429), statuses("alice", 12))
	// bob: 9 to 2 left; global 9 to 2 (3 and 2 near).
	assert.Equal(t, repeat(200, 8), statuses("bob", 8))
	// carol: 9 and 8 left; global 1 and 0 (both near), then refused.
	assert.Equal(t, []int{200, 200, 429}, statuses("carol", 3))

	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	got := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "ratelimit_near_limit_total{") {
			name, value, _ := strings.Cut(line, " ")
			got[name] = value
		}
	}
	require.NoError(t, sc.Err())
	assert.Equal(t, map[string]string{
		`ratelimit_near_limit_total{policy="default"}`: "2",
		`ratelimit_near_limit_total{policy="global"}`:  "4",
	}, got)
	http.DefaultClient.CloseIdleConnections()
}
