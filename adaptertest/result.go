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
