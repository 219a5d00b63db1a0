package ratelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
)

// shapingServer is a real HTTP server on loopback whose only client key is
// "c", limited by a LeakyShape policy on the real clock.
func shapingServer(t *testing.T, l ratelimit.Limit, handler http.HandlerFunc, opts ...ratelimit.Option) *httptest.Server {
	t.Helper()
	store, err := memorystore.New()
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: l, Algorithm: ratelimit.LeakyShape})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, func(*http.Request) (string, error) { return "c", nil }, opts...)
	require.NoError(t, err)
	srv := httptest.NewServer(nethttp.Middleware(m)(handler))
	t.Cleanup(srv.Close)
	return srv
}

// TestShapingEndToEnd: 5 per second, burst 10, twelve concurrent requests
// through a real server: eleven succeed, leaving about 200 ms apart (never
// earlier than their turn, never in bunches), and one is refused at once.
func TestShapingEndToEnd(t *testing.T) {
	srv := shapingServer(t, ratelimit.PerSecond(5).WithBurst(10), func(w http.ResponseWriter, r *http.Request) {})
	start := time.Now()
	var mu sync.Mutex
	var done []time.Duration
	var refused []time.Duration
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if resp.StatusCode == http.StatusOK {
				done = append(done, time.Since(start))
			} else {
				assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
				assert.Equal(t, "1", resp.Header.Get("Retry-After"))
				refused = append(refused, time.Since(start))
			}
		}()
	}
	wg.Wait()
	require.Len(t, done, 11)
	require.Len(t, refused, 1)
	assert.Less(t, refused[0], time.Second, "the refusal is immediate")
	slices.Sort(done)
	for i, d := range done {
		turn := time.Duration(i) * 200 * time.Millisecond
		assert.GreaterOrEqual(t, d, turn, "request %d completed before its turn", i+1)
		assert.Less(t, d, turn+time.Second, "request %d completed long after its turn", i+1)
	}
	// They leave one by one, not in bursts: any three completions span more
	// than half an interval (two intervals, less up to 300 ms of lateness
	// of the first on a loaded machine).
	for i := range len(done) - 2 {
		assert.GreaterOrEqual(t, done[i+2]-done[i], 100*time.Millisecond, "requests %d to %d left together", i+1, i+3)
	}
}

// TestShapingClientGoesAway: a client that disconnects while its request is
// queued never reaches the handler.
func TestShapingClientGoesAway(t *testing.T) {
	var handled atomic.Int64
	abandoned := make(chan error, 1)
	srv := shapingServer(t, ratelimit.PerSecond(1).WithBurst(10),
		func(w http.ResponseWriter, r *http.Request) { handled.Add(1) },
		ratelimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) { abandoned <- err }))

	resp, err := http.Get(srv.URL) // runs at once
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, int64(1), handled.Load())

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	_, err = http.DefaultClient.Do(req) // queued for 1 s; the client leaves after 100 ms
	require.ErrorIs(t, err, context.DeadlineExceeded)

	select {
	case err := <-abandoned:
		assert.ErrorIs(t, err, ratelimit.ErrWaitAbandoned)
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("the server kept waiting after the client left")
	}
	assert.Equal(t, int64(1), handled.Load(), "the abandoned request never reached the handler")
	http.DefaultClient.CloseIdleConnections()
}

// TestShapingDefaultAnswerWhenAbandoned: a server-side deadline ends the
// wait with 503 and Retry-After.
func TestShapingDefaultAnswerWhenAbandoned(t *testing.T) {
	srv := shapingServer(t, ratelimit.PerSecond(1).WithBurst(10), func(w http.ResponseWriter, r *http.Request) {})
	handler := srv.Config.Handler
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 50*time.Millisecond)
		defer cancel()
		handler.ServeHTTP(w, r.WithContext(ctx))
	})
	var codes []int
	for range 2 {
		resp, err := http.Get(srv.URL)
		require.NoError(t, err)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode != http.StatusOK {
			assert.Equal(t, "1", resp.Header.Get("Retry-After"))
		}
	}
	assert.Equal(t, []int{200, 503}, codes)
	http.DefaultClient.CloseIdleConnections()
}
