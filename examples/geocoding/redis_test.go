package main

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

// listeningLine returns the line of log that says the server listens.
func listeningLine(t *testing.T, log string) string {
	t.Helper()
	for line := range strings.Lines(log) {
		if strings.Contains(line, "geocoding: listening on ") {
			return line
		}
	}
	t.Fatalf("no listening line in the log:\n%s", log)
	return ""
}

// TestStartupLogNamesStore: the start-up line says which store the server
// uses, and where Redis is, without its password, with its refusal cache
// and lease time; a Redis that answers draws no warning.
func TestStartupLogNamesStore(t *testing.T) {
	_, log := startServerLog(t)
	assert.Contains(t, listeningLine(t, log.String()), " store=memory ")

	srv := redistest.Start(t, "--requirepass", "s3cret")
	_, log = startServerLog(t, "-store", "redis", "-redis-url", "redis://:s3cret@"+srv.Addr+"/2")
	line := listeningLine(t, log.String())
	assert.Contains(t, line, " store=redis redis="+srv.Addr+" db=2 refusal-cache=true ")
	assert.NotContains(t, line, "lease=")
	assert.NotContains(t, log.String(), "s3cret")
	assert.NotContains(t, log.String(), "unreachable")

	_, log = startServerLog(t, "-store", "redis", "-redis-url", "redis://:s3cret@"+srv.Addr+"/2", "-lease", "50ms", "-refusal-cache=false")
	assert.Contains(t, listeningLine(t, log.String()), " refusal-cache=false lease=50ms ")
}

// TestStartupRedisUnreachable: with nothing listening on Redis's port, the
// server says so at start-up, with the address (not the password) and the
// cause, then serves as -on-store-error says: closed answers 503 at once.
func TestStartupRedisUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	base, log := startServerLog(t, "-store", "redis", "-redis-url", "redis://:s3cret@"+addr+"/0", "-on-store-error", "closed")
	assert.Contains(t, log.String(), `level=WARN msg="geocoding: Redis is unreachable; serving with -on-store-error closed until it answers" redis=`+addr+" db=0 ")
	assert.Contains(t, log.String(), "connect: connection refused")
	assert.NotContains(t, log.String(), "s3cret")
	assert.Contains(t, listeningLine(t, log.String()), " store=redis redis="+addr+" ")

	client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, base+"/geocode?q=paris", nil)
	require.NoError(t, err)
	req.Header.Set(apiKeyHeader, "alice")
	start := time.Now()
	resp, err := client.Do(req)
	elapsed := time.Since(start)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	// The store's deadline is 2 s here (TestMain); a refused connection
	// fails long before.
	assert.Less(t, elapsed, time.Second, "the first 503 took %v", elapsed)
	t.Logf("time to the first 503: %v", elapsed)
}

// TestRedisRefusalCache: with -store redis, a client's refused requests
// are refused without asking Redis once its answer left no token, with the
// same status, header fields and body as Redis's own refusal (each server's
// test clock feeds the script, so the two agree to the nanosecond);
// -refusal-cache=false asks Redis every time.
func TestRedisRefusalCache(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	scripts := func() int64 { return redistest.Commands(t, admin, "evalsha", "eval") } // the decisions
	url := "redis://" + srv.Addr + "/0"
	cached, _ := newTestHandler(t, "-store", "redis", "-redis-url", url)
	direct, _ := newTestHandler(t, "-store", "redis", "-redis-url", url, "-refusal-cache=false")
	req := request{target: "/geocode?q=paris", apiKey: "alice"}
	assert.Equal(t, repeat(200, 10), statuses(cached, req, 10))
	before := scripts()
	local := serve(cached, req)
	assert.Equal(t, 429, local.Code)
	assert.Equal(t, repeat(429, 5), statuses(cached, req, 5))
	assert.Equal(t, before, scripts(), "refused without asking Redis")
	remote := serve(direct, req)
	assert.Equal(t, before+1, scripts(), "-refusal-cache=false asks Redis")
	assert.Equal(t, remote.Code, local.Code)
	assert.Equal(t, remote.Header(), local.Header())
	assert.Equal(t, remote.Body.String(), local.Body.String())
}

// TestRedisLease: with -lease, two servers on one Redis answer most of a
// busy client's requests without asking Redis, and together never admit
// more than the client's burst at one instant (each server's test clock
// stands still).
func TestRedisLease(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	scripts := func() int64 { return redistest.Commands(t, admin, "evalsha", "eval") }
	url := "redis://" + srv.Addr + "/0"
	a, _ := newTestHandler(t, "-store", "redis", "-redis-url", url, "-rate", "1000", "-burst", "100", "-lease", "50ms")
	b, _ := newTestHandler(t, "-store", "redis", "-redis-url", url, "-rate", "1000", "-burst", "100", "-lease", "50ms")
	req := request{target: "/geocode?q=paris", apiKey: "alice"}
	serve(a, request{target: "/geocode?q=paris", apiKey: "warm-up"})
	before := scripts()
	admitted := 0
	for _, h := range []http.Handler{a, b, a, b} {
		for _, code := range statuses(h, req, 40) {
			if code == http.StatusOK {
				admitted++
			}
		}
	}
	calls := scripts() - before
	t.Logf("160 requests, %d admitted, %d script calls", admitted, calls)
	assert.LessOrEqual(t, admitted, 100, "never more than the burst")
	assert.GreaterOrEqual(t, admitted, 100-2*100/8, "at most the two leases' tokens idle")
	assert.Less(t, calls, int64(60), "most requests answered from a lease or the refusal cache")
}
