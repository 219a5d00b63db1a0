package adaptertest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/tokenfair/ratelimit"
)

func testAdmitted(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(5, time.Minute)})
	for _, req := range []request{
		{client: "alice"},
		{method: http.MethodPost, path: "/other/path?q=1", client: "alice"},
		{method: http.MethodHead, client: "alice"},
		{path: "/status/201", client: "bob"},
	} {
		r := f.send(req)
		assertNextRan(t, req, r)
		assert.NotEmpty(t, r.Header.Get("RateLimit"), "the core's header fields")
	}
	assert.EqualValues(t, 4, f.adapter.calls.Load())
}

func testRefused(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(2, time.Minute)})
	for range 2 {
		f.send(request{client: "alice"})
	}
	for _, req := range []request{
		{client: "alice"},
		{method: http.MethodHead, client: "alice"},
		{method: http.MethodPost, path: "/other", client: "alice"},
	} {
		r := f.send(req)
		assertStopped(t, r, http.StatusTooManyRequests)
		assert.Equal(t, "30", r.Header.Get("Retry-After"))
	}
	assert.EqualValues(t, 2, f.adapter.calls.Load())
}

// failingStore is a store whose every call fails.
type failingStore struct{}

func (failingStore) Take(context.Context, *ratelimit.Policy, string, int64) (ratelimit.Result, error) {
	return ratelimit.Result{}, errors.New("adaptertest: store down")
}

func testErrors(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(5, time.Minute)})
	down := newFixture(t, nh, setup{limit: ratelimit.Per(5, time.Minute), store: failingStore{}})
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		assertStopped(t, f.send(request{method: method}), http.StatusUnauthorized)
		assertStopped(t, f.send(request{method: method, client: keyError}), http.StatusInternalServerError)
		r := down.send(request{method: method, client: "alice"})
		assertStopped(t, r, http.StatusServiceUnavailable)
		assert.Equal(t, "1", r.Header.Get("Retry-After"))
	}
	assert.Zero(t, f.adapter.calls.Load()+down.adapter.calls.Load())
}

// testCustomHandlers: answers that the adapter cannot take for JSON (a
// plain-text refusal) as well as ones it can (an application/json error).
func testCustomHandlers(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(1, time.Minute), opts: &ratelimit.MiddlewareOptions{
		OnDeny: func(w http.ResponseWriter, _ *http.Request, res ratelimit.Result) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, "slow down, "+res.Policy.Name+"\n")
		},
		OnError: func(w http.ResponseWriter, _ *http.Request, err error) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"error":"no entry"}`+"\n")
		},
	}})
	f.send(request{client: "alice"})
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		r := f.send(request{method: method, client: "alice"})
		assertStopped(t, r, http.StatusTooManyRequests)
		assert.Equal(t, "text/plain; charset=utf-8", r.Header.Get("Content-Type"))
		r = f.send(request{method: method})
		assertStopped(t, r, http.StatusForbidden)
		assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
	}
	assert.Equal(t, "slow down, per-key\n", f.send(request{client: "alice"}).Body)
	assert.Equal(t, `{"error":"no entry"}`+"\n", f.send(request{}).Body)
	assert.EqualValues(t, 1, f.adapter.calls.Load())
}
