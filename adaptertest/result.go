package adaptertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/tokenfair/ratelimit"
)

// testResultFrom: with ResultInContext, next's request carries the
// decision, which ratelimit.ResultFrom reads; without, it carries none.
func testResultFrom(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(5, time.Minute), opts: &ratelimit.MiddlewareOptions{ResultInContext: true}})
	for _, want := range []string{"true 4", "true 3"} {
		req := request{path: "/result", client: "alice"}
		r := f.send(req)
		assertNextRan(t, req, r)
		assert.Equal(t, want, r.Header.Get("X-Result"), "ResultFrom in next: found, remaining")
	}
	f = newFixture(t, nh, setup{limit: ratelimit.Per(5, time.Minute)})
	assert.Equal(t, "false 0", f.send(request{path: "/result", client: "alice"}).Header.Get("X-Result"), "without ResultInContext")
}

// testSettle: next's request settles its cost with ratelimit.Settle: more
// than reserved takes the rest, less gives the difference back, but never
// below 1 (a settlement of 0 costs 1), a second settlement or a negative
// cost is an error.
func testSettle(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(10, time.Minute), opts: &ratelimit.MiddlewareOptions{ResultInContext: true}})
	for _, step := range []struct {
		path, settled, remaining string // X-Settle, and what the next request is told is left
	}{
		{"/settle/4", "ok", `"per-key";r=5`}, // 10 − 4, − 1 for the request that looks
		{"/settle/0", "ok", `"per-key";r=3`}, // settled at 1: 5 − 1, − 1
		{"/settle/-1", "ratelimit: Settle: negative cost -1 of requests", `"per-key";r=1`},
	} {
		r := f.send(request{path: step.path, client: "alice"})
		assertNextRan(t, request{path: step.path, client: "alice"}, r)
		assert.Equal(t, step.settled, r.Header.Get("X-Settle"), step.path)
		got := f.send(request{client: "alice"}).Header.Get("RateLimit")
		assert.Contains(t, got, step.remaining+";", "after %s", step.path)
	}
}
