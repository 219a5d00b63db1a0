package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestNearLimitEndToEnd scrapes /metrics from a real demo server and finds
// the exact number of decisions that left each policy fewer than a fifth
// of its burst: with -burst 10, those that leave 1 or 0 tokens; with
// -global-burst 20, those that leave 3 to 0. A token every 100 s: no
// refill during the test.
func TestNearLimitEndToEnd(t *testing.T) {
	base := startServer(t, "-rate", "0.01", "-burst", "10", "-global-rate", "0.01", "-global-burst", "20")
	get := func(key string) int { return getStatus(t, base+"/geocode?q=paris", key) }
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

	assert.Equal(t, map[string]string{
		`ratelimit_near_limit_total{policy="default"}`: "2",
		`ratelimit_near_limit_total{policy="global"}`:  "4",
	}, scrape(t, base, "ratelimit_near_limit_total{"))
	http.DefaultClient.CloseIdleConnections()
}
