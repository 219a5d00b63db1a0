package ratelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/nethttp"
)

// shapingHandler limits handler by a LeakyShape policy of limit l, on a
// memory store with the default clock (inside a synctest bubble, the
// bubble's fake clock). Every request has the key "c".
func shapingHandler(t *testing.T, l ratelimit.Limit, handler http.HandlerFunc, opts *ratelimit.MiddlewareOptions) http.Handler {
	t.Helper()
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: l, Algorithm: ratelimit.LeakyShape})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, func(*http.Request) (string, error) { return "c", nil }, opts)
	require.NoError(t, err)
	return nethttp.Wrap(m)(handler)
}

// TestShapingEndToEnd: 5 per second, burst 10, twelve concurrent requests:
// eleven succeed, leaving exactly 200 ms apart, and one is refused at once.
func TestShapingEndToEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := shapingHandler(t, ratelimit.PerSecond(5).WithBurst(10), func(w http.ResponseWriter, r *http.Request) {}, nil)
		start := time.Now()
		var mu sync.Mutex
		var done, refused []time.Duration
		var wg sync.WaitGroup
		for range 12 {
			wg.Go(func() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
				mu.Lock()
				defer mu.Unlock()
				if w.Code == http.StatusOK {
					done = append(done, time.Since(start))
					return
				}
				assert.Equal(t, http.StatusTooManyRequests, w.Code)
				assert.Equal(t, "1", w.Header().Get("Retry-After"))
				refused = append(refused, time.Since(start))
			})
		}
		wg.Wait()
		require.Len(t, done, 11)
		assert.Equal(t, []time.Duration{0}, refused, "the refusal is immediate")
		slices.Sort(done)
		for i, d := range done {
			assert.Equal(t, time.Duration(i)*200*time.Millisecond, d, "request %d leaves at its turn", i+1)
		}
	})
}

// TestShapingImmediate: Immediate lets the first queued requests through at
// once; the ones after them keep their turns.
func TestShapingImmediate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{
			Limit: ratelimit.PerSecond(5).WithBurst(10), Algorithm: ratelimit.LeakyShape, Immediate: 3,
		})
		require.NoError(t, err)
		m, err := ratelimit.NewMiddleware(lim, func(*http.Request) (string, error) { return "c", nil }, nil)
		require.NoError(t, err)
		h := nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		start := time.Now()
		var mu sync.Mutex
		var done []time.Duration
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
				assert.Equal(t, http.StatusOK, w.Code)
				mu.Lock()
				defer mu.Unlock()
				done = append(done, time.Since(start))
			})
		}
		wg.Wait()
		slices.Sort(done)
		ms := time.Millisecond
		assert.Equal(t, []time.Duration{0, 0, 0, 0, 200 * ms, 400 * ms}, done)
	})
}

// TestShapingClientGoesAway: a client that leaves while its request is
// queued (its context ends) never reaches the handler, and the error
// handler sees ErrWaitAbandoned as soon as it leaves, and its place in the
// queue is given back.
func TestShapingClientGoesAway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var handled atomic.Int64
		var abandoned error
		h := shapingHandler(t, ratelimit.PerSecond(1).WithBurst(10),
			func(w http.ResponseWriter, r *http.Request) { handled.Add(1) },
			&ratelimit.MiddlewareOptions{OnError: func(w http.ResponseWriter, r *http.Request, err error) { abandoned = err }})

		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) // runs at once
		require.Equal(t, int64(1), handled.Load())

		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(100 * time.Millisecond)
			cancel()
		}()
		start := time.Now()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequestWithContext(ctx, "GET", "/", nil)) // queued for 1 s
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "the wait ends when the client leaves")
		assert.ErrorIs(t, abandoned, ratelimit.ErrWaitAbandoned)
		assert.ErrorIs(t, abandoned, context.Canceled)
		assert.Equal(t, int64(1), handled.Load(), "the abandoned request never reached the handler")

		// Its place in the queue is given back: the next request takes
		// the turn it left, 1 s after the first (900 ms from now), not the
		// one after it (1.9 s).
		start = time.Now()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		assert.Equal(t, time.Second-100*time.Millisecond, time.Since(start))
		assert.Equal(t, int64(2), handled.Load())
	})
}

// TestShapingDefaultAnswerWhenAbandoned: a wait that ends early for a
// cause the middleware could not foresee (a cancellation, not a deadline)
// is answered 503 with Retry-After, and its place is given back.
func TestShapingDefaultAnswerWhenAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shaped := shapingHandler(t, ratelimit.PerSecond(1).WithBurst(10), func(w http.ResponseWriter, r *http.Request) {}, nil)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			time.AfterFunc(50*time.Millisecond, cancel)
			shaped.ServeHTTP(w, r.WithContext(ctx))
		})
		var codes []int
		for range 2 {
			start := time.Now()
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			codes = append(codes, w.Code)
			if w.Code != http.StatusOK {
				assert.Equal(t, "1", w.Header().Get("Retry-After"))
				assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
				assert.Equal(t, 50*time.Millisecond, time.Since(start))
			}
		}
		assert.Equal(t, []int{200, 503}, codes)

		start := time.Now() // 50 ms after the first: its turn, given back, is 950 ms away
		shapingServe(shaped, httptest.NewRequest("GET", "/", nil))
		assert.Equal(t, 950*time.Millisecond, time.Since(start))
	})
}

// TestShapingOverRealServer is the end-to-end check on the real clock: a
// client that disconnects from a real server while queued ends the wait
// (net/http cancels the request's context), and the handler never runs.
func TestShapingOverRealServer(t *testing.T) {
	var handled atomic.Int64
	abandoned := make(chan error, 1)
	srv := httptest.NewServer(shapingHandler(t, ratelimit.Per(1, time.Minute).WithBurst(10),
		func(w http.ResponseWriter, r *http.Request) { handled.Add(1) },
		&ratelimit.MiddlewareOptions{OnError: func(w http.ResponseWriter, r *http.Request, err error) { abandoned <- err }}))
	defer srv.Close()
	client := srv.Client()
	defer client.CloseIdleConnections()

	resp, err := client.Get(srv.URL) // runs at once
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, int64(1), handled.Load())

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	_, err = client.Do(req) // queued for a minute; the client leaves after 1 s
	require.ErrorIs(t, err, context.DeadlineExceeded)

	select {
	case err := <-abandoned:
		assert.ErrorIs(t, err, ratelimit.ErrWaitAbandoned)
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("the server kept waiting after the client left")
	}
	assert.Equal(t, int64(1), handled.Load(), "the abandoned request never reached the handler")
}
