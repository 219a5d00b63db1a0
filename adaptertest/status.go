package adaptertest

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

func testCountIf(t *testing.T, nh NewHandler) {
	// The login guard: two failures a minute, successes never count. The
	// adapter must hand the core the status of the response, before the
	// client has it.
	seen := make(chan int, 20)
	f := newFixture(t, nh, setup{limit: ratelimit.Per(2, time.Minute), opts: &ratelimit.MiddlewareOptions{
		CountIf: func(status int) bool {
			seen <- status
			return status >= 400
		},
	}})
	for _, status := range []int{200, 204, 201, 0, 401, 500} {
		path := "/status/" + strconv.Itoa(status)
		if status == 0 { // no WriteHeader: the status is 200
			path, status = "/implicit", http.StatusOK
		}
		f.send(request{client: "alice", path: path})
		require.Len(t, seen, 2, "CountIf runs once on each side")
		assert.Equal(t, [2]int{status, status}, [2]int{<-seen, <-seen}, "the status CountIf saw for %s: reference, adapter", path)
	}
	assertStopped(t, f.send(request{client: "alice"}), http.StatusTooManyRequests)
	assert.Zero(t, len(seen), "CountIf saw a refused request")
}

// testAborted: a response counts once it has begun, whatever happens after;
// only a handler that wrote nothing and panicked gets its cost back. The
// adapter must report the status of a response whose handler panicked
// after it began (a download whose client hung up: httputil.ReverseProxy
// panics with http.ErrAbortHandler), and let the panic go on.
func testAborted(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(1, time.Minute), opts: &ratelimit.MiddlewareOptions{
		CountIf: func(status int) bool { return status < 400 }, // downloads count, failures do not
	}})
	for _, sd := range []*side{f.ref, f.adapter} {
		for range 3 {
			_, err := sd.do(request{client: "alice", path: "/panic"})
			require.Error(t, err, "the server closes the connection")
		}
		_, err := sd.do(request{client: "alice", path: "/abort"})
		require.Error(t, err, "the body is cut short")
		r := sd.must(t, request{client: "alice", path: "/abort"})
		assertStopped(t, r, http.StatusTooManyRequests)
	}
	assert.Equal(t, f.ref.calls.Load(), f.adapter.calls.Load())
	assert.EqualValues(t, 4, f.adapter.calls.Load(), "three panics that wrote nothing were given back; the begun download counted")
}

// testCountBytes: a policy of content-bytes costs a request the bytes of
// its body, which the adapter must count as they are written, and at least
// 1 (an empty body, HEAD, whose body net/http drops); a handler that takes
// the connection over (Hijack) keeps what it reserved, which the adapter
// must tell the core (next's written < 0); RateLimit-Policy says the quota
// counts bytes.
func testCountBytes(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(100, time.Minute), unit: "content-bytes"})
	r := f.send(request{client: "alice", path: "/bytes/30"})
	assert.Len(t, r.Body, 30, "the body of /bytes/30")
	assert.Equal(t, `"per-key";q=100;qu="content-bytes";w=60`, r.Header.Get("RateLimit-Policy"))
	assert.Equal(t, `"per-key";r=99;t=1`, r.Header.Get("RateLimit"), "1 byte reserved")
	// 30 bytes spent; this request reserves 1 more and writes 0.
	r = f.send(request{client: "alice", path: "/bytes/0"})
	assert.Equal(t, `"per-key";r=69;t=1`, r.Header.Get("RateLimit"), "the 30 bytes written were charged")
	r = f.send(request{client: "alice", path: "/bytes/50", method: http.MethodHead})
	assert.Contains(t, r.Header.Get("RateLimit"), `"per-key";r=68;`, "a body of 0 costs 1")
	assert.Empty(t, r.Body, "no body is sent for HEAD")
	r = f.send(request{client: "alice", path: "/bytes/68"})
	assert.Contains(t, r.Header.Get("RateLimit"), `"per-key";r=67;`, "a HEAD costs 1, whatever its handler writes")
	assertStopped(t, f.send(request{client: "alice"}), http.StatusTooManyRequests)

	// A hijacked connection's bytes are not the middleware's to see: the
	// request keeps the 10 it reserved, however much it wrote.
	f = newFixture(t, nh, setup{limit: ratelimit.Per(100, time.Minute), unit: "content-bytes", opts: &ratelimit.MiddlewareOptions{
		Costs: map[string]func(*http.Request) (int64, error){"content-bytes": func(*http.Request) (int64, error) { return 10, nil }}}})
	for range 3 {
		r = f.send(request{client: "bob", path: "/hijack/1000"})
		assert.Len(t, r.Body, 1000, "the body written on the hijacked connection")
	}
	r = f.send(request{client: "bob", path: "/bytes/0"})
	assert.Contains(t, r.Header.Get("RateLimit"), `"per-key";r=60;`, "3 hijacked responses kept their 10; this one reserves 10")
}
