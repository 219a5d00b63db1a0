package ratelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
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

// shapingServe serves r with h and returns the recorded answer.
func shapingServe(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestShapingQueuesBoundedAcrossKeys: 1000 keys send three requests each
// at once to a LeakyShape policy of 1 per second, burst 10: the first of
// each runs, and of the 2000 that would wait, the default bound (256)
// wait and the others are refused at once with 429 and Retry-After their
// wait. The parked goroutines are counted.
func TestShapingQueuesBoundedAcrossKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(1).WithBurst(10), Algorithm: ratelimit.LeakyShape})
		require.NoError(t, err)
		m, err := ratelimit.NewMiddleware(lim, func(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil }, nil)
		require.NoError(t, err)
		var handled atomic.Int64
		h := nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { handled.Add(1) }))

		const keys, each = 1000, 3
		before := runtime.NumGoroutine()
		var mu sync.Mutex
		codes := map[int]int{}
		retryAfter := map[string]int{}
		var inside atomic.Int64
		var wg sync.WaitGroup
		for k := range keys {
			for range each {
				wg.Go(func() {
					r := httptest.NewRequest("GET", "/", nil)
					r.Header.Set("X-Key", "k"+strconv.Itoa(k))
					inside.Add(1)
					w := shapingServe(h, r)
					inside.Add(-1)
					mu.Lock()
					defer mu.Unlock()
					codes[w.Code]++
					if w.Code == http.StatusTooManyRequests {
						retryAfter[w.Header().Get("Retry-After")]++
					}
				})
			}
		}
		synctest.Wait() // every request has run, been refused, or waits
		parked := runtime.NumGoroutine() - before
		assert.Equal(t, int64(256), inside.Load(), "requests waiting")
		// Goroutines of other tests may come and go meanwhile: a few.
		assert.InDelta(t, 256, parked, 4, "goroutines parked")
		mu.Lock()
		t.Logf("%d keys × %d requests: %d goroutines parked, %d refused at once", keys, each, parked, codes[http.StatusTooManyRequests])
		mu.Unlock()

		wg.Wait()
		assert.Equal(t, map[int]int{http.StatusOK: keys + 256, http.StatusTooManyRequests: keys*(each-1) - 256}, codes)
		assert.Equal(t, int64(keys+256), handled.Load())
		for v := range retryAfter {
			assert.Contains(t, []string{"1", "2"}, v, "Retry-After is the refused request's wait")
		}
	})
}

// TestShapingQueueFull: with MaxQueued 1, a request that would wait while
// another does is refused at once with Retry-After its wait, and gives
// back its place: its key's next request takes that turn.
func TestShapingQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(1).WithBurst(10), Algorithm: ratelimit.LeakyShape})
		require.NoError(t, err)
		m, err := ratelimit.NewMiddleware(lim, func(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil }, &ratelimit.MiddlewareOptions{MaxQueued: 1})
		require.NoError(t, err)
		h := nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		req := func(key string) *http.Request {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("X-Key", key)
			return r
		}
		start := time.Now()
		require.Equal(t, http.StatusOK, shapingServe(h, req("a")).Code)
		require.Equal(t, http.StatusOK, shapingServe(h, req("b")).Code)
		done := make(chan int)
		go func() { done <- shapingServe(h, req("a")).Code }() // waits 1 s: the queue is full
		synctest.Wait()

		w := shapingServe(h, req("b"))
		assert.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "1", w.Header().Get("Retry-After"))
		assert.Equal(t, []string{`"default";r=0;t=1`}, w.Header()["RateLimit"])
		assert.Equal(t, time.Duration(0), time.Since(start), "refused at once")

		assert.Equal(t, http.StatusOK, <-done)
		assert.Equal(t, time.Second, time.Since(start))
		// b's refused request gave its turn back: its next one, at b's
		// turn after the first (1 s), runs at once, without waiting.
		assert.Equal(t, http.StatusOK, shapingServe(h, req("b")).Code)
		assert.Equal(t, time.Second, time.Since(start))
	})
}

// TestShapingUnbounded: with MaxQueued -1, every request the policy
// queues waits.
func TestShapingUnbounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(1).WithBurst(10), Algorithm: ratelimit.LeakyShape})
		require.NoError(t, err)
		m, err := ratelimit.NewMiddleware(lim, func(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil }, &ratelimit.MiddlewareOptions{MaxQueued: -1})
		require.NoError(t, err)
		h := nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		var ok atomic.Int64
		var wg sync.WaitGroup
		for k := range 300 {
			for range 2 {
				wg.Go(func() {
					r := httptest.NewRequest("GET", "/", nil)
					r.Header.Set("X-Key", "k"+strconv.Itoa(k))
					if shapingServe(h, r).Code == http.StatusOK {
						ok.Add(1)
					}
				})
			}
		}
		wg.Wait()
		assert.Equal(t, int64(600), ok.Load(), "300 run at once, 300 wait, beyond the default 256")
	})
}

// withWriteTimeout returns r as served by a server whose WriteTimeout is d.
func withWriteTimeout(r *http.Request, d time.Duration) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), http.ServerContextKey, &http.Server{WriteTimeout: d}))
}

// TestShapingWaitPastWriteTimeout: under a server whose WriteTimeout is
// 2 s, a request whose wait (2 s) would end at the write deadline is
// refused at once with Retry-After its wait, never reaches the handler,
// and gives its turn back; one that waits 1 s waits.
func TestShapingWaitPastWriteTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var handled atomic.Int64
		h := shapingHandler(t, ratelimit.PerSecond(1).WithBurst(10), func(http.ResponseWriter, *http.Request) { handled.Add(1) }, nil)
		req := func() *http.Request { return withWriteTimeout(httptest.NewRequest("GET", "/", nil), 2*time.Second) }
		start := time.Now()
		require.Equal(t, http.StatusOK, shapingServe(h, req()).Code)
		done := make(chan int)
		go func() { done <- shapingServe(h, req()).Code }() // waits 1 s
		synctest.Wait()

		w := shapingServe(h, req()) // would wait 2 s
		assert.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "2", w.Header().Get("Retry-After"))
		assert.Equal(t, time.Duration(0), time.Since(start), "refused at once")
		assert.Equal(t, int64(1), handled.Load())

		// Its turn was given back: a request without a deadline takes it.
		assert.Equal(t, http.StatusOK, shapingServe(h, httptest.NewRequest("GET", "/", nil)).Code)
		assert.Equal(t, 2*time.Second, time.Since(start), "the refused request's turn, not the one after it")
		assert.Equal(t, http.StatusOK, <-done)
		assert.Equal(t, int64(3), handled.Load())
	})
}

// TestShapingWaitPastContextDeadline: a request whose context ends before
// its wait would is refused at once with Retry-After its wait, and gives
// its turn back.
func TestShapingWaitPastContextDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var handled atomic.Int64
		h := shapingHandler(t, ratelimit.PerSecond(1).WithBurst(10), func(http.ResponseWriter, *http.Request) { handled.Add(1) }, nil)
		start := time.Now()
		require.Equal(t, http.StatusOK, shapingServe(h, httptest.NewRequest("GET", "/", nil)).Code)

		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		w := shapingServe(h, httptest.NewRequestWithContext(ctx, "GET", "/", nil)) // would wait 1 s
		assert.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "1", w.Header().Get("Retry-After"))
		assert.Equal(t, time.Duration(0), time.Since(start), "refused at once")

		assert.Equal(t, http.StatusOK, shapingServe(h, httptest.NewRequest("GET", "/", nil)).Code)
		assert.Equal(t, time.Second, time.Since(start), "the refused request's turn, not the one after it")
		assert.Equal(t, int64(2), handled.Load())
	})
}

// TestShapingWriteTimeoutOverRealServer is the end-to-end check: behind a
// real server with WriteTimeout 1 s, a request that would wait a minute is
// answered 429 at once, with Retry-After 60, instead of waiting past the
// deadline and leaving the client with a broken connection.
func TestShapingWriteTimeoutOverRealServer(t *testing.T) {
	var handled atomic.Int64
	srv := httptest.NewUnstartedServer(shapingHandler(t, ratelimit.Per(1, time.Minute).WithBurst(10),
		func(w http.ResponseWriter, r *http.Request) { handled.Add(1) }, nil))
	srv.Config.WriteTimeout = time.Second
	srv.Start()
	defer srv.Close()
	client := srv.Client()
	client.Timeout = 5 * time.Second
	defer client.CloseIdleConnections()

	resp, err := client.Get(srv.URL) // runs at once
	require.NoError(t, err)
	resp.Body.Close()

	start := time.Now()
	resp, err = client.Get(srv.URL) // would wait a minute
	require.NoError(t, err, "the client gets an answer")
	resp.Body.Close()
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "60", resp.Header.Get("Retry-After"))
	assert.Less(t, time.Since(start), time.Second, "answered before the write deadline")
	assert.Equal(t, int64(1), handled.Load())
}

// TestShapingQueuePlaceFreedAfterPanic: a panic between taking a place in
// the queues and waiting (here in Observe) frees the place, so that a
// panicking request cannot shrink the bound for good.
func TestShapingQueuePlaceFreedAfterPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(1).WithBurst(10), Algorithm: ratelimit.LeakyShape})
		require.NoError(t, err)
		var panics atomic.Bool
		panics.Store(true)
		m, err := ratelimit.NewMiddleware(lim, func(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil }, &ratelimit.MiddlewareOptions{
			MaxQueued: 1,
			Observe: func(_ *http.Request, ev ratelimit.Event) {
				if ev.Result.Delay > 0 && panics.Swap(false) {
					panic("observer")
				}
			},
		})
		require.NoError(t, err)
		h := nethttp.Wrap(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		req := func(key string) *http.Request {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("X-Key", key)
			return r
		}
		require.Equal(t, http.StatusOK, shapingServe(h, req("a")).Code)
		assert.Panics(t, func() { shapingServe(h, req("a")) })
		require.Equal(t, http.StatusOK, shapingServe(h, req("b")).Code)
		assert.Equal(t, http.StatusOK, shapingServe(h, req("b")).Code, "b's request takes the place the panic left")
	})
}
