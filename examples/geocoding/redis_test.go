package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// TestRedisSharedQuota: two servers on one Redis share one quota: 5/s,
// burst 10, six requests to each at once → ten pass in all.
func TestRedisSharedQuota(t *testing.T) {
	srv := redistest.Start(t)
	args := []string{"-store", "redis", "-redis-url", "redis://" + srv.Addr + "/0"}
	a, clockA := newTestHandler(t, args...)
	b, clockB := newTestHandler(t, args...)
	req := request{target: "/geocode?q=paris", apiKey: "alice"}
	got := append(statuses(a, req, 6), statuses(b, req, 6)...)
	assert.Equal(t, append(repeat(200, 10), 429, 429), got)
	w := serve(b, req)
	assert.Equal(t, `"default";r=0;t=1`, field(w.Header(), "RateLimit"))
	// One second later (each server's test clock feeds the script), the
	// shared bucket has earned five tokens.
	clockA.Advance(time.Second)
	clockB.Advance(time.Second)
	assert.Equal(t, repeat(200, 3), statuses(a, req, 3))
	assert.Equal(t, append(repeat(200, 2), 429), statuses(b, req, 3))
}

// TestRedisFailureModes kills Redis and checks each -on-store-error.
func TestRedisFailureModes(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr + "/0"
	open, _ := newTestHandler(t, "-store", "redis", "-redis-url", url, "-on-store-error", "open")
	closed, _ := newTestHandler(t, "-store", "redis", "-redis-url", url, "-on-store-error", "closed")
	local, _ := newTestHandler(t, "-store", "redis", "-redis-url", url, "-on-store-error", "local", "-instances", "2")
	req := request{target: "/geocode?q=paris", apiKey: "alice"}
	for _, h := range []http.Handler{open, closed, local} {
		assert.Equal(t, http.StatusOK, serve(h, req).Code, "Redis up")
	}
	srv.Kill()

	assert.Equal(t, repeat(200, 20), statuses(open, req, 20), "open: everything passes unchecked")
	w := serve(closed, req)
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Equal(t, "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity", decode(t, w)["type"])
	assert.Equal(t, append(repeat(200, 5), 429), statuses(local, req, 6), "local: half of the burst of 10 on each of 2 instances")
}
