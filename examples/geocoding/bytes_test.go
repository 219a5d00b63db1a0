package main

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// The bodies that the tests of -daily-bytes are charged.
const (
	parisBody    = `{"query":"paris","name":"Paris","lat":48.8566,"lon":2.3522}` + "\n"
	atlantisBody = `{"type":"about:blank","title":"Not Found","status":404,"detail":"unknown place"}` + "\n"
)

// bytesPolicy is the RateLimit-Policy item of -daily-bytes n on a day of
// 24 hours.
func bytesPolicy(n int) string {
	return `"daily-bytes";q=` + strconv.Itoa(n) + `;qu="content-bytes";w=86400`
}

// TestDailyBytesPolicy: RateLimit-Policy lists "daily-bytes" with
// qu="content-bytes" beside the request policies: after the calendar
// quotas, before the global one; its w is the length of the day in -tz.
func TestDailyBytesPolicy(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-daily-bytes", "5000"}, `"default";q=10;w=2,` + bytesPolicy(5000)},
		{[]string{"-daily-bytes", "5000", "-daily", "3", "-monthly", "100", "-global-rate", "50"},
			`"default";q=10;w=2,"daily";q=3;w=86400,"monthly";q=100;w=2678400,` + bytesPolicy(5000) + `,"global";q=50;w=1`},
		{[]string{"-daily-bytes", "0", "-daily", "3"}, `"default";q=10;w=2,"daily";q=3;w=86400`},
	} {
		h, clock := newTestHandler(t, tc.args...)
		setClock(clock, time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC))
		w := serve(h, request{target: "/geocode?q=paris", apiKey: "alice"})
		require.Equal(t, http.StatusOK, w.Code, "%v", tc.args)
		assert.Equal(t, tc.want, field(w.Header(), "RateLimit-Policy"), "%v", tc.args)
	}

	h, clock := newTestHandler(t, "-daily-bytes", "5000", "-tz", "Europe/Paris")
	setClock(clock, time.Date(2026, 3, 29, 12, 0, 0, 0, inZone(t, "Europe/Paris")))
	w := serve(h, request{target: "/geocode?q=paris", apiKey: "alice"})
	assert.Equal(t, `"default";q=10;w=2,"daily-bytes";q=5000;qu="content-bytes";w=82800`, field(w.Header(), "RateLimit-Policy"), "a day of 23 hours")
}

// TestDailyBytesCharge: each admitted request reserves one byte and, once
// answered, is charged the exact length of its body, whatever its status:
// a HEAD's empty body counts one byte; a batch reserves one byte, not one
// per name, and is charged its body. Each request's RateLimit (the quota
// of bytes binds: the rate's burst is far larger) shows what the one
// before it was charged.
func TestDailyBytesCharge(t *testing.T) {
	const quota = 5000
	h, clock := newTestHandler(t, "-daily-bytes", strconv.Itoa(quota), "-rate", "1000", "-burst", "100000")
	setClock(clock, time.Date(2026, 1, 10, 20, 30, 0, 0, time.UTC))
	const toMidnight = "12600"
	left := quota // before each request
	for _, tc := range []struct {
		name   string
		req    request
		status int
		body   string
	}{
		{"GET", request{target: "/geocode?q=paris"}, 200, parisBody},
		{"GET again", request{target: "/geocode?q=paris"}, 200, parisBody},
		{"HEAD", request{method: http.MethodHead, target: "/geocode?q=paris"}, 200, parisBody},
		{"unknown place", request{target: "/geocode?q=atlantis"}, 404, atlantisBody},
		{"no q", request{target: "/geocode"}, 400,
			`{"type":"about:blank","title":"Bad Request","status":400,"detail":"missing query parameter q"}` + "\n"},
		{"wrong method", request{method: http.MethodDelete, target: "/geocode?q=paris"}, 405,
			`{"type":"about:blank","title":"Method Not Allowed","status":405,"detail":"only GET and HEAD are allowed"}` + "\n"},
		{"HEAD of a wrong path", request{method: http.MethodHead, target: "/nowhere"}, 404,
			`{"type":"about:blank","title":"Not Found","status":404,"detail":"no such endpoint; try GET /geocode?q=paris"}` + "\n"},
		{"batch", postBatch("", "paris\natlantis\ntokyo\n"), 200,
			`[{"query":"paris","name":"Paris","lat":48.8566,"lon":2.3522},{"query":"tokyo","name":"Tokyo","lat":35.6762,"lon":139.6503}]` + "\n"},
		{"batch finding nothing", postBatch("", "atlantis\n"), 200, "[]\n"},
		{"GET at last", request{target: "/geocode?q=paris"}, 200, parisBody},
	} {
		tc.req.apiKey = "alice"
		w := serve(h, tc.req)
		require.Equal(t, tc.status, w.Code, "%s: body %q", tc.name, w.Body.String())
		assert.Equal(t, tc.body, w.Body.String(), tc.name)
		assert.Equal(t, `"daily-bytes";r=`+strconv.Itoa(left-1)+`;t=`+toMidnight, field(w.Header(), "RateLimit"),
			"%s: one byte reserved, after all that the requests before were charged", tc.name)
		if tc.req.method == http.MethodHead {
			left-- // net/http sends no body, whatever the handler writes
		} else {
			left -= max(len(tc.body), 1)
		}
	}
}

// TestDailyBytesCrossing: a request passes while the quota has a byte
// left, and the response that crosses the quota is written and charged in
// full; the key then waits for midnight in -tz: refused by "daily-bytes"
// with Retry-After and t the seconds to it, rounded up, until a
// nanosecond before it.
func TestDailyBytesCrossing(t *testing.T) {
	loc := inZone(t, "Asia/Kolkata")
	h, clock := newTestHandler(t, "-daily-bytes", "100", "-tz", "Asia/Kolkata")
	setClock(clock, time.Date(2026, 1, 10, 20, 30, 0, int(250*time.Millisecond), loc))
	req := request{target: "/geocode?q=paris", apiKey: "alice"}
	const toMidnight = "12600" // 3 h 29 min 59.75 s

	w := serve(h, req)
	require.Equal(t, http.StatusOK, w.Code)
	w = serve(h, req)
	require.Equal(t, http.StatusOK, w.Code, "%d bytes left of 100", 100-len(parisBody))
	assert.Equal(t, parisBody, w.Body.String(), "the response that crosses the quota is whole")
	assert.Equal(t, `"daily-bytes";r=`+strconv.Itoa(100-len(parisBody)-1)+`;t=`+toMidnight, field(w.Header(), "RateLimit"))

	for range 2 {
		w = serve(h, req)
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, toMidnight, w.Header().Get("Retry-After"))
		assert.Equal(t, `"daily-bytes";r=0;t=`+toMidnight, field(w.Header(), "RateLimit"))
		assert.Equal(t, `"default";q=10;w=2,`+bytesPolicy(100), field(w.Header(), "RateLimit-Policy"))
		assert.Equal(t, []any{"daily-bytes"}, decode(t, w)["violated-policies"])
	}
	assert.Equal(t, http.StatusOK, serve(h, request{target: "/geocode?q=paris", apiKey: "bob"}).Code, "another key")

	midnight := time.Date(2026, 1, 11, 0, 0, 0, 0, loc)
	setClock(clock, midnight.Add(-time.Nanosecond))
	w = serve(h, req)
	assert.Equal(t, http.StatusTooManyRequests, w.Code, "a nanosecond before midnight")
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	setClock(clock, midnight)
	assert.Equal(t, []int{200, 200, 429}, statuses(h, req, 3), "from midnight")
}

// TestDailyBytesRefusalNotCharged: a request that the rate refuses is
// not charged the bytes of its 429 body; when the quota of bytes binds
// (the least left relative to its quota: 79 of 200 bytes against 1 of 2
// requests), RateLimit shows the bytes left.
func TestDailyBytesRefusalNotCharged(t *testing.T) {
	h, clock := newTestHandler(t, "-rate", "1", "-burst", "2", "-daily-bytes", "200")
	setClock(clock, time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC))
	req := request{target: "/geocode?q=paris", apiKey: "alice"}
	require.Equal(t, []int{200, 200}, statuses(h, req, 2))
	w := serve(h, req)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, []any{"default"}, decode(t, w)["violated-policies"])
	require.Greater(t, w.Body.Len(), 200-2*len(parisBody), "a 429 body larger than the bytes left")

	clock.Advance(2 * time.Second)
	w = serve(h, req)
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"daily-bytes";r=`+strconv.Itoa(200-2*len(parisBody)-1)+`;t=43198`, field(w.Header(), "RateLimit"), "two seconds later")
}

// TestDailyBytesCountFailed: with -count failed, a response whose status
// does not count gives back its request, yet is charged its body, as with
// -count all: its bytes were sent, whatever its status.
func TestDailyBytesCountFailed(t *testing.T) {
	h, clock := newTestHandler(t, "-count", "failed", "-daily-bytes", "1000", "-rate", "1000", "-burst", "100000")
	setClock(clock, time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC))
	paris := request{target: "/geocode?q=paris", apiKey: "alice"}
	left := 1000
	for range 3 {
		w := serve(h, paris)
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, `"daily-bytes";r=`+strconv.Itoa(left-1)+`;t=43200`, field(w.Header(), "RateLimit"), "the 200s before were charged their bodies")
		left -= len(parisBody)
	}
	for range 2 {
		require.Equal(t, http.StatusNotFound, serve(h, request{target: "/geocode?q=atlantis", apiKey: "alice"}).Code)
		left -= len(atlantisBody)
	}
	w := serve(h, paris)
	assert.Equal(t, `"daily-bytes";r=`+strconv.Itoa(left-1)+`;t=43200`, field(w.Header(), "RateLimit"), "the 404s' bodies charged")
}

// TestDailyBytesPlans: with -plans, every key has the quota of bytes of
// the flag, whatever its plan's limiter: with a plan of its own quotas,
// with a plan of none, and without a plan.
func TestDailyBytesPlans(t *testing.T) {
	path := plansFile(t, `{"gold": {"rate": 100, "burst": 50, "daily": 3}, "free": {"daily": 0}}`)
	h, clock := newHandlerWith(t, nil, "-plans", path, "-daily", "7", "-daily-bytes", "100")
	setClock(clock, time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC))
	for _, tc := range []struct{ apiKey, policy string }{
		{"gold", `"default";q=50;w=1,"daily";q=3;w=86400,` + bytesPolicy(100)},
		{"free", `"default";q=10;w=2,` + bytesPolicy(100)},
		{"nobody", `"default";q=10;w=2,"daily";q=7;w=86400,` + bytesPolicy(100)},
	} {
		req := request{target: "/geocode?q=paris", apiKey: tc.apiKey}
		w := serve(h, req)
		require.Equal(t, http.StatusOK, w.Code, tc.apiKey)
		assert.Equal(t, tc.policy, field(w.Header(), "RateLimit-Policy"), tc.apiKey)
		require.Equal(t, http.StatusOK, serve(h, req).Code, "%s: crossing the quota", tc.apiKey)
		w = serve(h, req)
		require.Equal(t, http.StatusTooManyRequests, w.Code, tc.apiKey)
		assert.Equal(t, []any{"daily-bytes"}, decode(t, w)["violated-policies"], tc.apiKey)
		assert.Equal(t, "43200", w.Header().Get("Retry-After"), tc.apiKey)
	}
}

// TestDailyBytesRedis: two servers on one Redis share each key's quota of
// bytes, charged by the server that answered.
func TestDailyBytesRedis(t *testing.T) {
	srv := redistest.Start(t)
	args := []string{"-store", "redis", "-redis-url", "redis://" + srv.Addr + "/0", "-daily-bytes", "100"}
	a, clockA := newTestHandler(t, args...)
	b, clockB := newTestHandler(t, args...)
	noon := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	setClock(clockA, noon)
	setClock(clockB, noon)
	req := request{target: "/geocode?q=paris", apiKey: "alice"}
	require.Equal(t, http.StatusOK, serve(a, req).Code)
	w := serve(b, req)
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"daily-bytes";r=`+strconv.Itoa(100-len(parisBody)-1)+`;t=43200`, field(w.Header(), "RateLimit"), "a's response charged")
	w = serve(a, req)
	require.Equal(t, http.StatusTooManyRequests, w.Code, "b's response crossed the quota")
	assert.Equal(t, "43200", w.Header().Get("Retry-After"))
	assert.Equal(t, []any{"daily-bytes"}, decode(t, w)["violated-policies"])
}

// TestDailyBytesFrameworks: each framework charges what goes on the wire:
// a GET its body, a HEAD one byte.
func TestDailyBytesFrameworks(t *testing.T) {
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			srv, clock := newTestServer(t, "-framework", fw, "-daily-bytes", "1000", "-rate", "1000", "-burst", "100000")
			setClock(clock, time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC))
			left := 1000 // before each request
			for _, req := range []request{
				{target: "/geocode?q=paris", apiKey: "alice"},
				{method: http.MethodHead, target: "/geocode?q=paris", apiKey: "alice"},
				{method: http.MethodHead, target: "/geocode/batch", apiKey: "alice"},
				postBatch("alice", "paris\n"),
				{target: "/geocode?q=paris", apiKey: "alice"},
			} {
				a := fetch(t, srv, req)
				assert.Equal(t, `"daily-bytes";r=`+strconv.Itoa(left-1)+`;t=43200`, a.Header.Get("RateLimit"), "%s %s", req.method, req.target)
				left -= max(len(a.Body), 1)
			}
		})
	}
}

// TestDailyBytesAdminReset: POST /admin/reset forgets the key's bytes too.
func TestDailyBytesAdminReset(t *testing.T) {
	h, _ := newTestHandler(t, "-daily-bytes", "100", "-admin-token", adminToken)
	req := request{target: "/geocode?q=paris", apiKey: "alice"}
	require.Equal(t, []int{200, 200, 429}, statuses(h, req, 3))
	require.Equal(t, http.StatusNoContent, adminReset(h, "POST", "alice", "Bearer "+adminToken).Code)
	assert.Equal(t, []int{200, 200, 429}, statuses(h, req, 3), "alice's day starts anew")
}
