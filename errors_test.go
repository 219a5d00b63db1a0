package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/storeerr"
)

var sentinels = map[string]error{
	"ErrMissingKey":    ratelimit.ErrMissingKey,
	"ErrBadRequest":    ratelimit.ErrBadRequest,
	"ErrStore":         ratelimit.ErrStore,
	"ErrKeyState":      storeerr.ErrKeyState,
	"ErrWaitAbandoned": ratelimit.ErrWaitAbandoned,
	"ErrPanic":         ratelimit.ErrPanic,
}

// Each error wraps exactly one of the sentinel errors (ErrKeyState also
// ErrStore, which it is), and DefaultErrorHandler answers it with its status.
func TestSentinelErrors(t *testing.T) {
	limit := ratelimit.Per(5, time.Minute) // slow: the queued request waits 12 s, however loaded the machine
	for _, tc := range []struct {
		name   string
		store  ratelimit.Store
		algo   ratelimit.Algorithm
		key    ratelimit.KeyFunc
		opts   ratelimit.MiddlewareOptions
		cancel bool // the request's context has ended
		want   string
		status int
	}{
		{name: "no identity", key: func(*http.Request) (string, error) { return "", ratelimit.ErrMissingKey }, want: "ErrMissingKey", status: 401},
		{name: "empty key", key: func(*http.Request) (string, error) { return "", nil }, want: "ErrMissingKey", status: 401},
		{name: "no client IP", key: func(*http.Request) (string, error) { return "", fmt.Errorf("%w: no address", ratelimit.ErrBadRequest) }, want: "ErrBadRequest", status: 400},
		{name: "negative cost", opts: ratelimit.MiddlewareOptions{Cost: func(*http.Request) (int64, error) { return -1, nil }}, want: "ErrBadRequest", status: 400},
		{name: "cost above burst", opts: ratelimit.MiddlewareOptions{Cost: func(*http.Request) (int64, error) { return 6, nil }}, want: "ErrBadRequest", status: 400},
		{name: "cost function fails", opts: ratelimit.MiddlewareOptions{Cost: func(*http.Request) (int64, error) { return 0, errors.New("bad batch") }}, want: "ErrBadRequest", status: 400},
		{name: "store fails", store: failingStore{errDown}, want: "ErrStore", status: 503},
		{name: "a key's state is unusable", store: failingStore{fmt.Errorf("%w: WRONGTYPE", storeerr.ErrKeyState)}, want: "ErrKeyState", status: 503},
		{name: "slot store fails", opts: ratelimit.MiddlewareOptions{MaxInFlight: 1, Slots: failingSlots{}, SlotLease: time.Second, SlotName: "api"}, want: "ErrStore", status: 503},
		{name: "client left the queue", algo: ratelimit.LeakyShape, cancel: true, want: "ErrWaitAbandoned", status: 503},
		{name: "key function panics", key: func(*http.Request) (string, error) { panic("boom") }, want: "ErrPanic", status: 500},
		{name: "cost function panics", opts: ratelimit.MiddlewareOptions{Cost: func(*http.Request) (int64, error) { panic("boom") }}, want: "ErrPanic", status: 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := tc.key
			if key == nil {
				key = oneKey
			}
			var got error
			opts := tc.opts
			opts.OnError = func(w http.ResponseWriter, r *http.Request, err error) {
				got = err
				ratelimit.DefaultErrorHandler(w, r, err)
			}
			h := newHarness(t, setup{policies: []ratelimit.Policy{{Limit: limit, Algorithm: tc.algo}}, store: tc.store, key: key, opts: &opts})
			if tc.cancel { // one request empties the queue; the next must wait
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
			}
			r := httptest.NewRequest("GET", "/", nil)
			if tc.cancel {
				ctx, cancel := context.WithCancel(r.Context())
				cancel()
				r = r.WithContext(ctx)
			}
			w := serve(h, r)
			assert.Equal(t, tc.status, w.Code)
			require.Error(t, got)
			for name, sentinel := range sentinels {
				want := name == tc.want || name == "ErrStore" && tc.want == "ErrKeyState"
				assert.Equal(t, want, errors.Is(got, sentinel), "errors.Is(%q, %s)", got, name)
			}
		})
	}
}
