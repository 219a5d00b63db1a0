package ratelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

// shapingSetup is a harness of one LeakyShape policy of limit l, keyed by
// key, with opts, on the real clock (inside a synctest bubble, the
// bubble's fake one).
func shapingSetup(l ratelimit.Limit, key ratelimit.KeyFunc, opts *ratelimit.MiddlewareOptions) setup {
	return setup{policies: []ratelimit.Policy{{Limit: l, Algorithm: ratelimit.LeakyShape}}, realClock: true, key: key, opts: opts}
}

// loginSetup is the login guard: five failed logins a minute per client,
// each counted in failures; a successful login (password "right") is not
// counted.
func loginSetup(failures *atomic.Int64) setup {
	return setup{
		policies: []ratelimit.Policy{{Name: "logins", Limit: ratelimit.Per(5, time.Minute)}},
		opts:     &ratelimit.MiddlewareOptions{CountIf: func(status int) bool { return status >= 400 }},
		next: func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Password") != "right" {
				failures.Add(1)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Write([]byte("welcome"))
		},
	}
}

// TestShapingQueuesBoundedAcrossKeys: 1000 keys send three requests each
// at once to a LeakyShape policy of 1 per second, burst 10: the first of
// each runs, and of the 2000 that would wait, the default bound (256)
// wait and the others are refused at once with 429 and Retry-After their
// wait. The parked goroutines are counted.
func TestShapingQueuesBoundedAcrossKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, shapingSetup(ratelimit.PerSecond(1).WithBurst(10), keyByHeader, nil))

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
					r.Header.Set("X-Client", "k"+strconv.Itoa(k))
					inside.Add(1)
					w := serve(h, r)
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
		assert.Equal(t, int64(keys+256), h.calls.Load())
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
		h := newHarness(t, shapingSetup(ratelimit.PerSecond(1).WithBurst(10), keyByHeader, &ratelimit.MiddlewareOptions{MaxQueued: 1}))
		req := func(key string) *http.Request {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("X-Client", key)
			return r
		}
		start := time.Now()
		require.Equal(t, http.StatusOK, serve(h, req("a")).Code)
		require.Equal(t, http.StatusOK, serve(h, req("b")).Code)
		done := make(chan int)
		go func() { done <- serve(h, req("a")).Code }() // waits 1 s: the queue is full
		synctest.Wait()

		w := serve(h, req("b"))
		assert.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "1", w.Header().Get("Retry-After"))
		assert.Equal(t, []string{`"default";r=0;t=1`}, w.Header()["RateLimit"])
		assert.Equal(t, time.Duration(0), time.Since(start), "refused at once")

		assert.Equal(t, http.StatusOK, <-done)
		assert.Equal(t, time.Second, time.Since(start))
		// b's refused request gave its turn back: its next one, at b's
		// turn after the first (1 s), runs at once, without waiting.
		assert.Equal(t, http.StatusOK, serve(h, req("b")).Code)
		assert.Equal(t, time.Second, time.Since(start))
	})
}

// TestShapingUnbounded: with MaxQueued -1, every request the policy
// queues waits.
func TestShapingUnbounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, shapingSetup(ratelimit.PerSecond(1).WithBurst(10), keyByHeader, &ratelimit.MiddlewareOptions{MaxQueued: -1}))
		var ok atomic.Int64
		var wg sync.WaitGroup
		for k := range 300 {
			for range 2 {
				wg.Go(func() {
					r := httptest.NewRequest("GET", "/", nil)
					r.Header.Set("X-Client", "k"+strconv.Itoa(k))
					if serve(h, r).Code == http.StatusOK {
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
		h := newHarness(t, shapingSetup(ratelimit.PerSecond(1).WithBurst(10), oneKey, nil))
		req := func() *http.Request { return withWriteTimeout(httptest.NewRequest("GET", "/", nil), 2*time.Second) }
		start := time.Now()
		require.Equal(t, http.StatusOK, serve(h, req()).Code)
		done := make(chan int)
		go func() { done <- serve(h, req()).Code }() // waits 1 s
		synctest.Wait()

		w := serve(h, req()) // would wait 2 s
		assert.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "2", w.Header().Get("Retry-After"))
		assert.Equal(t, time.Duration(0), time.Since(start), "refused at once")
		assert.Equal(t, int64(1), h.calls.Load())

		// Its turn was given back: a request without a deadline takes it.
		assert.Equal(t, http.StatusOK, serve(h, httptest.NewRequest("GET", "/", nil)).Code)
		assert.Equal(t, 2*time.Second, time.Since(start), "the refused request's turn, not the one after it")
		assert.Equal(t, http.StatusOK, <-done)
		assert.Equal(t, int64(3), h.calls.Load())
	})
}

// TestShapingWaitPastContextDeadline: a request whose context ends before
// its wait would is refused at once with Retry-After its wait, and gives
// its turn back.
func TestShapingWaitPastContextDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, shapingSetup(ratelimit.PerSecond(1).WithBurst(10), oneKey, nil))
		start := time.Now()
		require.Equal(t, http.StatusOK, serve(h, httptest.NewRequest("GET", "/", nil)).Code)

		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		w := serve(h, httptest.NewRequestWithContext(ctx, "GET", "/", nil)) // would wait 1 s
		assert.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "1", w.Header().Get("Retry-After"))
		assert.Equal(t, time.Duration(0), time.Since(start), "refused at once")

		assert.Equal(t, http.StatusOK, serve(h, httptest.NewRequest("GET", "/", nil)).Code)
		assert.Equal(t, time.Second, time.Since(start), "the refused request's turn, not the one after it")
		assert.Equal(t, int64(2), h.calls.Load())
	})
}

// TestShapingWriteTimeoutOverRealServer is the end-to-end check: behind a
// real server with WriteTimeout 1 s, a request that would wait a minute is
// answered 429 at once, with Retry-After 60, instead of waiting past the
// deadline and leaving the client with a broken connection.
func TestShapingWriteTimeoutOverRealServer(t *testing.T) {
	h := newHarness(t, shapingSetup(ratelimit.Per(1, time.Minute).WithBurst(10), oneKey, nil))
	srv := httptest.NewUnstartedServer(h)
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
	assert.Equal(t, int64(1), h.calls.Load())
}

// TestShapingQueuePlaceFreedAfterPanic: a panic between taking a place in
// the queues and waiting (here in Observe) frees the place, so that a
// panicking request cannot shrink the bound for good.
func TestShapingQueuePlaceFreedAfterPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var panics atomic.Bool
		panics.Store(true)
		h := newHarness(t, shapingSetup(ratelimit.PerSecond(1).WithBurst(10), keyByHeader, &ratelimit.MiddlewareOptions{
			MaxQueued: 1,
			Observe: func(_ *http.Request, ev ratelimit.Event) {
				if ev.Result.Delay > 0 && panics.Swap(false) {
					panic("observer")
				}
			},
		}))
		req := func(key string) *http.Request {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("X-Client", key)
			return r
		}
		require.Equal(t, http.StatusOK, serve(h, req("a")).Code)
		assert.Panics(t, func() { serve(h, req("a")) })
		require.Equal(t, http.StatusOK, serve(h, req("b")).Code)
		assert.Equal(t, http.StatusOK, serve(h, req("b")).Code, "b's request takes the place the panic left")
	})
}

func login(h http.Handler, client, password string) int {
	r := httptest.NewRequest("POST", "/login", nil)
	r.Header.Set("X-Client", client)
	r.Header.Set("X-Password", password)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

func TestLoginGuard(t *testing.T) {
	h := newHarness(t, loginSetup(new(atomic.Int64)))
	require.True(t, h.m.CountsResponses())
	for range 20 {
		require.Equal(t, 200, login(h, "alice", "right"), "successful logins are never counted")
	}
	var codes []int
	for range 6 {
		codes = append(codes, login(h, "alice", "wrong"))
	}
	assert.Equal(t, []int{401, 401, 401, 401, 401, 429}, codes, "five failed logins, then 429")
	assert.Equal(t, 429, login(h, "alice", "right"), "once the budget is spent, every login waits")
	assert.Equal(t, 200, login(h, "bob", "right"), "another client is unaffected")
}

// TestLoginGuardBanksNothing is the banking attack on the login guard: a
// client holds five successful (uncounted) logins open, lets the bucket
// refill, spends five failures, then lets the open ones finish. Their
// give-backs must credit nothing: the bucket has been full since they were
// taken. (It admitted five more failures at the same instant: ten with a
// burst of five.) A reset followed by the give-backs banks nothing either.
func TestLoginGuardBanksNothing(t *testing.T) {
	for _, reset := range []bool{false, true} {
		entered, release := make(chan struct{}), make(chan struct{})
		guard := loginSetup(new(atomic.Int64))
		guard.next = func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Password") == "right" {
				entered <- struct{}{}
				<-release // held open
				return
			}
			w.WriteHeader(http.StatusUnauthorized)
		}
		h := newHarness(t, guard)
		var open sync.WaitGroup
		for range 5 {
			open.Go(func() { assert.Equal(t, 200, login(h, "mallory", "right")) })
			<-entered
		}
		if reset {
			require.NoError(t, h.lim.Reset(context.Background(), "mallory"))
		} else {
			h.clock.Advance(time.Minute) // full again
		}
		var codes []int
		for range 5 {
			codes = append(codes, login(h, "mallory", "wrong"))
		}
		require.Equal(t, []int{401, 401, 401, 401, 401}, codes)
		close(release)
		open.Wait()
		codes = nil
		for range 5 {
			codes = append(codes, login(h, "mallory", "wrong"))
		}
		assert.Equal(t, []int{429, 429, 429, 429, 429}, codes, "reset %v: the open requests banked nothing", reset)
	}
}

// A request whose handler panics under CountIf gets its cost back: its
// status never came, so it cannot count.
func TestCountIfPanicGivesBack(t *testing.T) {
	h := newHarness(t, setup{
		policies: []ratelimit.Policy{{Name: "logins", Limit: ratelimit.Per(5, time.Minute)}},
		opts:     &ratelimit.MiddlewareOptions{CountIf: func(int) bool { return true }},
	})
	m, lim := h.m, h.lim
	r := httptest.NewRequest("POST", "/login", nil)
	r.Header.Set("X-Client", "alice")
	for range 10 {
		assert.PanicsWithValue(t, "boom", func() { m.Handle(httptest.NewRecorder(), r, func(*http.Request) (int, int64) { panic("boom") }) })
	}
	res, err := lim.Take(context.Background(), "alice", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(5), res.Remaining, "every panicking request gave its token back")
	m.Handle(httptest.NewRecorder(), r, func(*http.Request) (int, int64) { return 200, 0 })
	res, err = lim.Take(context.Background(), "alice", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(4), res.Remaining, "a counted request keeps its token")
}

func TestLoginGuardConcurrent(t *testing.T) {
	var failures atomic.Int64
	h := newHarness(t, loginSetup(&failures))
	require.True(t, h.m.CountsResponses())
	lim := h.lim
	var wg sync.WaitGroup
	var refused atomic.Int64
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			password := "right"
			if i%2 == 0 {
				password = "wrong"
			}
			if login(h, "mallory", password) == 429 {
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, failures.Load(), int64(5), "never more than five failed attempts reach the handler")
	assert.Positive(t, refused.Load())
	res, err := lim.Take(context.Background(), "mallory", 0)
	require.NoError(t, err)
	assert.Equal(t, 5-failures.Load(), res.Remaining, "successful logins gave their tokens back; failures kept theirs")
}

// TestShapingEndToEnd: 5 per second, burst 10, twelve concurrent requests:
// eleven succeed, leaving exactly 200 ms apart, and one is refused at once.
func TestShapingEndToEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, shapingSetup(ratelimit.PerSecond(5).WithBurst(10), oneKey, nil))
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
		immediate := shapingSetup(ratelimit.PerSecond(5).WithBurst(10), oneKey, nil)
		immediate.policies[0].Immediate = 3
		h := newHarness(t, immediate)
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
		var abandoned error
		h := newHarness(t, shapingSetup(ratelimit.PerSecond(1).WithBurst(10), oneKey, &ratelimit.MiddlewareOptions{OnError: func(w http.ResponseWriter, r *http.Request, err error) { abandoned = err }}))

		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) // runs at once
		require.Equal(t, int64(1), h.calls.Load())

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
		assert.Equal(t, int64(1), h.calls.Load(), "the abandoned request never reached the handler")

		// Its place in the queue is given back: the next request takes
		// the turn it left, 1 s after the first (900 ms from now), not the
		// one after it (1.9 s).
		start = time.Now()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		assert.Equal(t, time.Second-100*time.Millisecond, time.Since(start))
		assert.Equal(t, int64(2), h.calls.Load())
	})
}

// TestShapingDefaultAnswerWhenAbandoned: a wait that ends early for a
// cause the middleware could not foresee (a cancellation, not a deadline)
// is answered 503 with Retry-After, and its place is given back.
func TestShapingDefaultAnswerWhenAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shaped := newHarness(t, shapingSetup(ratelimit.PerSecond(1).WithBurst(10), oneKey, nil))
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
		serve(shaped, httptest.NewRequest("GET", "/", nil))
		assert.Equal(t, 950*time.Millisecond, time.Since(start))
	})
}

// TestShapingOverRealServer is the end-to-end check on the real clock: a
// client that disconnects from a real server while queued ends the wait
// (net/http cancels the request's context), and the handler never runs.
func TestShapingOverRealServer(t *testing.T) {
	abandoned := make(chan error, 1)
	h := newHarness(t, shapingSetup(ratelimit.Per(1, time.Minute).WithBurst(10), oneKey,
		&ratelimit.MiddlewareOptions{OnError: func(w http.ResponseWriter, r *http.Request, err error) { abandoned <- err }}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := srv.Client()
	defer client.CloseIdleConnections()

	resp, err := client.Get(srv.URL) // runs at once
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, int64(1), h.calls.Load())

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
	assert.Equal(t, int64(1), h.calls.Load(), "the abandoned request never reached the handler")
}
