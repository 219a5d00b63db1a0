package ratelimit_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/refusers"
)

// memSlots is a SlotStore in memory, on the real clock (or, in a synctest
// bubble, the bubble's), that counts its calls.
type memSlots struct {
	mu       sync.Mutex
	slots    map[string]map[string]time.Time // key → token → end of its lease
	acquires int
}

func (s *memSlots) Acquire(_ context.Context, key, token string, limit int64, lease time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acquires++
	if s.slots == nil {
		s.slots = map[string]map[string]time.Time{}
	}
	held := s.slots[key]
	if held == nil {
		held = map[string]time.Time{}
		s.slots[key] = held
	}
	now := time.Now()
	for token, end := range held {
		if !now.Before(end) {
			delete(held, token)
		}
	}
	if _, ok := held[token]; !ok && int64(len(held)) >= limit {
		return false, nil
	}
	held[token] = now.Add(lease)
	return true, nil
}

func (s *memSlots) Release(_ context.Context, key, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.slots[key], token)
	return nil
}

// held returns the number of slots of key whose lease has not ended.
func (s *memSlots) held(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, end := range s.slots[key] {
		if time.Now().Before(end) {
			n++
		}
	}
	return n
}

// slotsSetup is a harness over slots with opts, on the real clock (the
// synctest bubble's), whose requests to /wait run until gate closes and
// to /slow for a second, whatever their context.
func slotsSetup(slots ratelimit.SlotStore, gate chan struct{}, opts ratelimit.MiddlewareOptions) setup {
	opts.Slots = slots
	return setup{limit: ratelimit.PerSecond(1000), realClock: true, opts: &opts, next: func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/wait":
			<-gate
		case "/slow":
			time.Sleep(time.Second)
		}
	}}
}

// serveAs answers a GET of path by client on h, in the background, and
// sends the status to codes.
func serveAs(wg *sync.WaitGroup, h http.Handler, client, path string, codes chan<- int) {
	wg.Go(func() {
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set("X-Client", client)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		codes <- w.Code
	})
}

// TestSlotsPerMiddleware: two middlewares on one SlotStore keep their
// in-flight limits apart, as in-process slots do: two API calls running
// (MaxInFlight 5) leave the client's one download (MaxInFlight 1) free;
// two instances of the download middleware (one SlotName) share theirs.
func TestSlotsPerMiddleware(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slots, gate := new(memSlots), make(chan struct{})
		lease := time.Minute
		api := newHarness(t, slotsSetup(slots, gate, ratelimit.MiddlewareOptions{MaxInFlight: 5, MaxInFlightTotal: 2, SlotLease: lease, SlotName: "api"}))
		download := newHarness(t, slotsSetup(slots, gate, ratelimit.MiddlewareOptions{MaxInFlight: 1, MaxInFlightTotal: 10, SlotLease: lease, SlotName: "download"}))
		replica := newHarness(t, slotsSetup(slots, gate, ratelimit.MiddlewareOptions{MaxInFlight: 1, MaxInFlightTotal: 10, SlotLease: lease, SlotName: "download"}))
		var wg sync.WaitGroup
		codes := make(chan int, 10)
		serveAs(&wg, api, "c", "/wait", codes)
		serveAs(&wg, api, "c", "/wait", codes)
		synctest.Wait()
		require.Equal(t, 0, len(codes), "both API calls run")
		serveAs(&wg, download, "c", "/wait", codes)
		synctest.Wait()
		assert.Equal(t, 0, len(codes), "the download runs beside two API calls")
		assert.Equal(t, 2, slots.held("api:c"))
		assert.Equal(t, 1, slots.held("download:c"))
		assert.Equal(t, 2, slots.held("api"), "the API's total")
		assert.Equal(t, 1, slots.held("download"), "the downloads' total")
		serveAs(&wg, replica, "c", "/", codes)
		synctest.Wait()
		require.Len(t, codes, 1)
		assert.Equal(t, http.StatusTooManyRequests, <-codes, "the other instance's download holds the slot")
		close(gate)
		wg.Wait()
		close(codes)
		for c := range codes {
			assert.Equal(t, http.StatusOK, c)
		}
		for _, key := range []string{"api:c", "download:c", "api", "download"} {
			assert.Zero(t, slots.held(key), "slots of %q released", key)
		}
	})
}

// TestSlotsRenewed: a request keeps its shared slot however long it runs,
// even once its client has gone, since it renews the leases of its slots
// every third of SlotLease: with a lease of 300 ms and MaxInFlight 1, a
// request that runs for a second keeps every other request of its key out
// for that second, and renews nothing once it has ended.
func TestSlotsRenewed(t *testing.T) {
	for _, clientLeaves := range []bool{false, true} {
		t.Run(fmt.Sprintf("client leaves %v", clientLeaves), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				slots := new(memSlots)
				const lease = 300 * time.Millisecond
				h := newHarness(t, slotsSetup(slots, nil, ratelimit.MiddlewareOptions{MaxInFlight: 1, MaxInFlightTotal: 1, SlotLease: lease, SlotName: "upload"}))
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if clientLeaves {
					time.AfterFunc(50*time.Millisecond, cancel)
				}
				slow := make(chan int, 1)
				go func() {
					r := httptest.NewRequestWithContext(ctx, "GET", "/slow", nil)
					r.Header.Set("X-Client", "c")
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					slow <- w.Code
				}()
				get := func() int {
					r := httptest.NewRequest("GET", "/", nil)
					r.Header.Set("X-Client", "c")
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					return w.Code
				}
				start := time.Now()
				for range 9 {
					time.Sleep(100 * time.Millisecond)
					assert.Equal(t, http.StatusTooManyRequests, get(), "at %v, while the slow request runs", time.Since(start))
					assert.Equal(t, 1, slots.held("upload:c"), "at %v: the key's slot", time.Since(start))
					assert.Equal(t, 1, slots.held("upload"), "at %v: the total's slot", time.Since(start))
				}
				assert.Equal(t, http.StatusOK, <-slow)
				assert.Equal(t, time.Second, time.Since(start), "the slow request ran its second")
				assert.Equal(t, http.StatusOK, get(), "the slot is free once the slow request has ended")
				synctest.Wait()
				calls := slots.acquires
				time.Sleep(10 * lease)
				assert.Equal(t, calls, slots.acquires, "renewals after the request ended")
				assert.Zero(t, slots.held("upload:c")+slots.held("upload"))
			})
		})
	}
}

// TestInFlight: MaxInFlight admits at most three requests of a key at once,
// names the in-flight policy in a refusal, and frees a slot when the
// handler returns, panics, or ends because the client went away.
func TestInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var running, peak atomic.Int64
		gate := make(chan struct{})
		h := newHarness(t, setup{limit: ratelimit.PerSecond(1000), realClock: true, opts: &ratelimit.MiddlewareOptions{MaxInFlight: 3}, next: func(w http.ResponseWriter, r *http.Request) {
			n := running.Add(1)
			defer running.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			switch r.URL.Path {
			case "/panic":
				panic(http.ErrAbortHandler)
			case "/wait":
				<-gate
			case "/hang":
				<-r.Context().Done()
			}
		}})
		serve := func(ctx context.Context, path string) (w *httptest.ResponseRecorder) {
			w = httptest.NewRecorder()
			defer func() {
				if p := recover(); p != nil && p != http.ErrAbortHandler {
					panic(p)
				}
			}()
			r := httptest.NewRequestWithContext(ctx, "GET", path, nil)
			r.Header.Set("X-Client", "c")
			h.ServeHTTP(w, r)
			return w
		}
		ctx := context.Background()

		// Five slow requests at once: exactly three run; two are refused.
		var wg sync.WaitGroup
		codes := make(chan int, 5)
		for range 5 {
			wg.Go(func() { codes <- serve(ctx, "/wait").Code })
		}
		synctest.Wait()
		require.Len(t, codes, 2, "two refused at once, three running")
		assert.Equal(t, int64(3), running.Load())
		refusal := serve(ctx, "/")
		assert.Equal(t, 429, refusal.Code)
		assert.Equal(t, "1", refusal.Header().Get("Retry-After"))
		assert.Equal(t, []string{`"default";q=1000;w=1,"inflight";q=3;qu="concurrent-requests"`}, refusal.Header()["RateLimit-Policy"], "one field line, so that Get sees the in-flight limit too")
		assert.Equal(t, `"inflight";r=0;t=1`, field(refusal.Header(), "RateLimit"))
		close(gate)
		wg.Wait()
		close(codes)
		var got []int
		for c := range codes {
			got = append(got, c)
		}
		assert.ElementsMatch(t, []int{429, 429, 200, 200, 200}, got)
		assert.Equal(t, int64(3), peak.Load())

		// Slots come back after panics and after clients that went away.
		for range 5 {
			serve(ctx, "/panic")
		}
		for range 3 {
			ctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			start := time.Now()
			serve(ctx, "/hang")
			assert.Equal(t, 20*time.Millisecond, time.Since(start), "the handler ends when the client leaves")
			cancel()
		}
		assert.Zero(t, running.Load())
		for range 3 {
			assert.Equal(t, 200, serve(ctx, "/").Code, "every slot came back")
		}
	})
}

type failingSlots struct{}

func (failingSlots) Acquire(context.Context, string, string, int64, time.Duration) (bool, error) {
	return false, errDown
}

func (failingSlots) Release(context.Context, string, string) error { return errDown }

func TestSlotStoreFailure(t *testing.T) {
	s := newHarness(t, setup{limit: ratelimit.Per(5, time.Minute), opts: &ratelimit.MiddlewareOptions{MaxInFlight: 1, Slots: failingSlots{}, SlotLease: time.Minute, SlotName: "api"}})
	lim := s.lim
	for range 3 {
		w := s.get("c")
		assert.Equal(t, http.StatusServiceUnavailable, w.Code)
		assert.Empty(t, field(w.Header(), "RateLimit"), "no decision was answered")
	}
	assert.Zero(t, s.calls.Load())
	res, err := lim.Take(context.Background(), "c", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(5), res.Remaining, "the tokens taken before each failure were given back")

	for _, opts := range []ratelimit.MiddlewareOptions{
		{MaxInFlight: 1, Slots: failingSlots{}},                               // no lease
		{Slots: failingSlots{}, SlotLease: time.Second},                       // no limit
		{MaxInFlightTotal: 1, Slots: failingSlots{}, SlotLease: -time.Second}, // negative lease
		{MaxInFlight: -1, MaxInFlightTotal: 2},
	} {
		_, err := ratelimit.NewMiddleware(lim, keyByHeader, &opts)
		assert.Error(t, err, "%+v", opts)
	}
}

type recordingObserver struct{ events []ratelimit.Event }

func (o *recordingObserver) Observe(_ *http.Request, ev ratelimit.Event) {
	o.events = append(o.events, ev)
}

// TestInFlightRefusalObserved: an in-flight refusal reaches MiddlewareOptions.Observe as
// a refusal by the "inflight" policy.
func TestInFlightRefusalObserved(t *testing.T) {
	obs := &recordingObserver{}
	var h *harness
	var innerRequest func(outer *http.Request) *http.Request // the request the outer one's handler makes
	inner := 0
	h = newHarness(t, setup{limit: ratelimit.Per(5, time.Minute), opts: &ratelimit.MiddlewareOptions{MaxInFlight: 1, Observe: obs.Observe}, next: func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/outer" {
			inner = serve(h, innerRequest(r)).Code
		}
	}})
	lim := h.lim
	innerRequest = func(outer *http.Request) *http.Request {
		return httptest.NewRequest("GET", "/inner", nil).WithContext(outer.Context())
	}
	r := httptest.NewRequest("GET", "/outer", nil)
	r.Header.Set("X-Client", "c")
	h.ServeHTTP(httptest.NewRecorder(), r)
	require.Len(t, obs.events, 2)
	assert.Equal(t, 401, inner, "the inner request has no X-Client")
	assert.NoError(t, obs.events[0].Err, "the outer request is observed before its handler runs")
	assert.ErrorIs(t, obs.events[1].Err, ratelimit.ErrMissingKey)

	obs.events = nil
	innerRequest = func(*http.Request) *http.Request {
		in := httptest.NewRequest("GET", "/inner", nil)
		in.Header.Set("X-Client", "c")
		return in
	}
	h.ServeHTTP(httptest.NewRecorder(), r)
	assert.Equal(t, 429, inner)
	require.Len(t, obs.events, 2)
	assert.True(t, obs.events[0].Result.Allowed)
	assert.Same(t, lim, obs.events[0].Limiter)
	assert.Equal(t, "default", obs.events[0].Result.Policy.Name)
	assert.False(t, obs.events[1].Result.Allowed)
	assert.Equal(t, []string{"inflight"}, refusers.Names(obs.events[1].Result, false))
	assert.Equal(t, "inflight", obs.events[1].Result.Policy.Name)
	assert.Equal(t, time.Second, obs.events[1].Result.RetryAfter)
	assert.Same(t, lim, obs.events[1].Limiter)
}

// TestInFlightTotal: a total in-flight limit holds across keys: with two
// slots in all, a third client is refused while two requests run, whatever
// its own per-key room, and admitted once one of them ends.
func TestInFlightTotal(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := newHarness(t, setup{limit: ratelimit.PerSecond(1000), opts: &ratelimit.MiddlewareOptions{MaxInFlight: 5, MaxInFlightTotal: 2}, next: func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			entered <- struct{}{}
			<-release
		}
	}})
	get := func(client, path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set("X-Client", client)
		return serve(h, r)
	}
	done := make(chan int, 2)
	for _, client := range []string{"a", "b"} {
		go func() { done <- get(client, "/wait").Code }()
		<-entered
	}
	refused := get("c", "/")
	assert.Equal(t, http.StatusTooManyRequests, refused.Code)
	assert.Contains(t, field(refused.Header(), "RateLimit-Policy"), `,"inflight";q=2;qu="concurrent-requests"`, "the binding quota is the total")
	release <- struct{}{}
	assert.Equal(t, http.StatusOK, <-done)
	assert.Equal(t, http.StatusOK, get("c", "/").Code, "a slot came back")
	close(release)
	assert.Equal(t, http.StatusOK, <-done)
}

// TestInFlightQuotaIsAnSFInteger: a limit too large for a Structured Field
// Integer (15 digits at most, RFC 9651) is sent clamped, as policies' are,
// so that strict parsers still read the field.
func TestInFlightQuotaIsAnSFInteger(t *testing.T) {
	h := newHarness(t, setup{limit: ratelimit.PerSecond(10), opts: &ratelimit.MiddlewareOptions{MaxInFlightTotal: math.MaxInt}})
	w := h.get("a")
	assert.Equal(t, `"default";q=10;w=1,"inflight";q=999999999999999;qu="concurrent-requests"`, field(w.Header(), "RateLimit-Policy"))
}
