package adaptertest

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

// testInFlight: with one request at a time per key, the slot is held while
// next runs and released when it returns, or panics. The adapter must run
// the rest of the chain inside the core's Handle.
func testInFlight(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(100, time.Minute), opts: &ratelimit.MiddlewareOptions{MaxInFlight: 1}})
	var answers [2][5]response // reference, adapter
	for i, sd := range []*side{f.ref, f.adapter} {
		errs := make(chan error, 1)
		go func() {
			var err error
			answers[i][2], err = sd.do(request{path: "/block", client: "alice"})
			errs <- err
		}()
		<-sd.entered
		answers[i][0] = sd.must(t, request{client: "alice"})
		answers[i][1] = sd.must(t, request{client: "bob"})
		sd.release <- struct{}{}
		require.NoError(t, <-errs)
		answers[i][3] = sd.must(t, request{client: "alice"})
		// A POST, which the client does not retry on a closed connection.
		_, err := sd.do(request{method: http.MethodPost, path: "/panic", client: "alice"})
		require.Error(t, err, "next panicked: the server drops the connection")
		answers[i][4] = sd.must(t, request{client: "alice"})
	}
	require.Equal(t, answers[0], answers[1], "the adapter's answers differ from net/http's")
	got := answers[1]
	assertStopped(t, got[0], http.StatusTooManyRequests)
	for _, r := range got[1:] {
		assert.Equal(t, http.StatusOK, r.Status)
		assert.Equal(t, "ran", r.Header.Get("X-Next"))
	}
	assert.EqualValues(t, 5, f.adapter.calls.Load())
}
