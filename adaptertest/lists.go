package adaptertest

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/tokenfair/ratelimit"
)

func testSkip(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(1, time.Minute), opts: &ratelimit.MiddlewareOptions{
		Skip: func(r *http.Request) bool { return r.URL.Path == "/healthz" },
	}})
	f.send(request{client: "alice"})
	assertStopped(t, f.send(request{client: "alice"}), http.StatusTooManyRequests)
	for _, client := range []string{"alice", "", keyError} {
		req := request{client: client, path: "/healthz"}
		r := f.send(req)
		assertNextRan(t, req, r)
		assert.Empty(t, r.Header.Get("RateLimit"), "a skipped request is not decided")
	}
	assert.EqualValues(t, 4, f.adapter.calls.Load())
}

// testAddressLists: the suite's clients connect from loopback addresses,
// which one fixture blocks (403 before the key function: GET and HEAD)
// and another treats as safe (never limited, no rate-limit fields, even
// without a key).
func testAddressLists(t *testing.T, nh NewHandler) {
	loopback := []string{"127.0.0.0/8", "::1"}
	blocked := newFixture(t, nh, setup{limit: ratelimit.Per(1, time.Minute), opts: &ratelimit.MiddlewareOptions{Block: loopback}})
	for _, req := range []request{{client: "alice"}, {method: http.MethodHead, client: "alice"}, {}} {
		r := blocked.send(req)
		assertStopped(t, r, http.StatusForbidden)
		assert.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
		assert.Empty(t, r.Header.Get("RateLimit"), "a blocked request is not decided")
	}
	safe := newFixture(t, nh, setup{limit: ratelimit.Per(1, time.Minute), opts: &ratelimit.MiddlewareOptions{Safe: loopback}})
	for _, client := range []string{"alice", "alice", "", keyError} {
		req := request{client: client}
		r := safe.send(req)
		assertNextRan(t, req, r)
		assert.Empty(t, r.Header.Get("RateLimit"), "a safe request is not decided")
	}
	assert.Zero(t, blocked.adapter.calls.Load())
	assert.EqualValues(t, 4, safe.adapter.calls.Load())
}
