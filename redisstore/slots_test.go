package redisstore_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
	"github.com/tokenfair/ratelimit/storetest"
)

// TestSlotsShared: two instances with clients of their own share a limit
// of two in-flight requests per key through Redis.
func TestSlotsShared(t *testing.T) {
	srv := redistest.Start(t)
	var running, peak atomic.Int64
	gate := make(chan struct{})
	instance := func() http.Handler {
		slots := newStore(t, srv.Client(), &redisstore.Options{Timeout: 5 * time.Second})
		mem, err := memorystore.New(nil)
		require.NoError(t, err)
		lim, err := ratelimit.New(mem, ratelimit.Policy{Limit: ratelimit.PerSecond(1000).WithBurst(1000)})
		require.NoError(t, err)
		m, err := ratelimit.NewMiddleware(lim, func(*http.Request) (string, error) { return "k", nil },
			&ratelimit.MiddlewareOptions{MaxInFlight: 2, Slots: slots, SlotLease: time.Minute, SlotName: "api"})
		require.NoError(t, err)
		return nethttp.Wrap(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := running.Add(1)
			defer running.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			<-gate
		}))
	}
	a, b := instance(), instance()
	codes := make(chan int, 6)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := httptest.NewRecorder()
			[]http.Handler{a, b}[i%2].ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			codes <- w.Code
		}()
	}
	require.Eventually(t, func() bool { return len(codes) == 4 }, 5*time.Second, time.Millisecond)
	close(gate)
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	assert.Equal(t, map[int]int{200: 2, 429: 4}, count)
	assert.Equal(t, int64(2), peak.Load())
	n, err := srv.Client().ZCard(context.Background(), "ratelimit::inflight:api:k").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "every slot was released")
}

// slotsHandler returns a handler limited by a Middleware whose in-flight
// slots are in slots, with opts, keyed by X-Client; its requests to /wait
// run until gate closes.
func slotsHandler(t *testing.T, slots *redisstore.Store, gate chan struct{}, opts ratelimit.MiddlewareOptions) http.Handler {
	t.Helper()
	mem, err := memorystore.New(nil)
	require.NoError(t, err)
	lim, err := ratelimit.New(mem, ratelimit.Policy{Limit: ratelimit.PerSecond(1000).WithBurst(1000)})
	require.NoError(t, err)
	opts.Slots = slots
	m, err := ratelimit.NewMiddleware(lim, func(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }, &opts)
	require.NoError(t, err)
	return nethttp.Wrap(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			<-gate
		}
	}))
}

// get answers a GET of path by client on h.
func get(h http.Handler, client, path string) int {
	r := httptest.NewRequest("GET", path, nil)
	r.Header.Set("X-Client", client)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// TestSlotsPerMiddleware: two middlewares on one Redis keep their
// in-flight limits apart: two API calls running (MaxInFlight 5) leave the
// client's first download (MaxInFlight 1) free, while two instances of the
// download middleware (one SlotName) share its one slot.
func TestSlotsPerMiddleware(t *testing.T) {
	client := redistest.Start(t).Client()
	store := newStore(t, client, nil)
	gate := make(chan struct{})
	api := slotsHandler(t, store, gate, ratelimit.MiddlewareOptions{MaxInFlight: 5, SlotLease: time.Minute, SlotName: "api"})
	download := slotsHandler(t, store, gate, ratelimit.MiddlewareOptions{MaxInFlight: 1, SlotLease: time.Minute, SlotName: "download"})
	replica := slotsHandler(t, newStore(t, client, nil), gate, ratelimit.MiddlewareOptions{MaxInFlight: 1, SlotLease: time.Minute, SlotName: "download"})
	ctx := context.Background()
	card := func(key string) int64 {
		n, err := client.ZCard(ctx, key).Result()
		require.NoError(t, err)
		return n
	}
	codes := make(chan int, 3)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { codes <- get(api, "c", "/wait") })
	}
	require.Eventually(t, func() bool { return card("ratelimit::inflight:api:c") == 2 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, http.StatusOK, get(download, "c", "/"), "the first download, beside two API calls")
	wg.Go(func() { codes <- get(download, "c", "/wait") })
	require.Eventually(t, func() bool { return card("ratelimit::inflight:download:c") == 1 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, http.StatusTooManyRequests, get(replica, "c", "/"), "the other instance's download holds the slot")
	close(gate)
	wg.Wait()
	close(codes)
	for c := range codes {
		assert.Equal(t, http.StatusOK, c)
	}
	assert.Zero(t, card("ratelimit::inflight:api:c")+card("ratelimit::inflight:download:c"), "every slot was released")
}

// TestSlotsRenewedWhileRunning: a request keeps its slot for as long as
// it runs (a slow upload), several leases long. With MaxInFlight 1 and a
// SlotLease of 200 ms, a request of the key every 250 ms, alternately on
// two instances, finds the slot taken while the first one runs: one runs
// at a time, not four. Once it ends, its slot is gone for good.
func TestSlotsRenewedWhileRunning(t *testing.T) {
	client := redistest.Start(t).Client()
	var running, peak atomic.Int64
	gate := make(chan struct{})
	instance := func() http.Handler {
		mem, err := memorystore.New(nil)
		require.NoError(t, err)
		lim, err := ratelimit.New(mem, ratelimit.Policy{Limit: ratelimit.PerSecond(1000).WithBurst(1000)})
		require.NoError(t, err)
		m, err := ratelimit.NewMiddleware(lim, func(*http.Request) (string, error) { return "k", nil },
			&ratelimit.MiddlewareOptions{MaxInFlight: 1, Slots: newStore(t, client, nil), SlotLease: 200 * time.Millisecond, SlotName: "upload"})
		require.NoError(t, err)
		return nethttp.Wrap(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := running.Add(1)
			defer running.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			<-gate
		}))
	}
	instances := []http.Handler{instance(), instance()}
	codes := make(chan int, 4)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() { codes <- get(instances[i%2], "c", "/") })
		time.Sleep(250 * time.Millisecond)
	}
	close(gate)
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	assert.Equal(t, map[int]int{200: 1, 429: 3}, count)
	assert.Equal(t, int64(1), peak.Load(), "requests of the key running at once")
	ctx := context.Background()
	n, err := client.Exists(ctx, "ratelimit::inflight:upload:k").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the slot was released")
	time.Sleep(400 * time.Millisecond) // two leases: a renewal now would bring the slot back
	n, err = client.Exists(ctx, "ratelimit::inflight:upload:k").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "no renewal after the request ended")
}

// TestSlotsExpire: the slots of an instance that died (never released)
// come back when their lease ends.
func TestSlotsExpire(t *testing.T) {
	clock := new(storetest.Clock)
	client := redistest.Start(t).Client()
	s := newStore(t, client, &redisstore.Options{Clock: clock.Now})
	ctx := context.Background()
	for _, token := range []string{"a", "b", "c"} {
		ok, err := s.Acquire(ctx, "k", token, 3, time.Second)
		require.NoError(t, err)
		require.True(t, ok)
	}
	ok, err := s.Acquire(ctx, "k", "d", 3, time.Second)
	require.NoError(t, err)
	assert.False(t, ok, "all three slots are held")
	clock.Advance(time.Second - time.Millisecond)
	ok, _ = s.Acquire(ctx, "k", "d", 3, time.Second)
	assert.False(t, ok, "the leases are not over")
	clock.Advance(time.Millisecond)
	ok, err = s.Acquire(ctx, "k", "d", 3, time.Second)
	require.NoError(t, err)
	assert.True(t, ok, "the dead instance's leases ended")
	ttl, err := client.PTTL(ctx, "ratelimit::inflight:k").Result()
	require.NoError(t, err)
	assert.Positive(t, ttl, "the set expires with its newest lease")
	require.NoError(t, s.Release(ctx, "k", "d"))
	n, err := client.ZCard(ctx, "ratelimit::inflight:k").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(0), n)
}

// TestSlotsRenew: Acquire with the token that holds a slot extends its
// lease from now, even when every slot is taken; a token whose lease
// ended takes a slot again only if one is free.
func TestSlotsRenew(t *testing.T) {
	clock := new(storetest.Clock)
	s := newStore(t, redistest.Start(t).Client(), &redisstore.Options{Clock: clock.Now})
	ctx := context.Background()
	start := clock.Now()
	acquire := func(token string, want bool, why string) {
		t.Helper()
		ok, err := s.Acquire(ctx, "k", token, 1, time.Second)
		require.NoError(t, err)
		assert.Equal(t, want, ok, "Acquire(%q) at %v: %s", token, clock.Now().Sub(start), why)
	}
	acquire("a", true, "a free slot")
	for range 5 { // 4.5 s: four and a half leases
		clock.Advance(900 * time.Millisecond)
		acquire("b", false, "a's lease is not over")
		acquire("a", true, "a renews its lease")
	}
	clock.Advance(999 * time.Millisecond)
	acquire("b", false, "a's last renewal is not over")
	clock.Advance(time.Millisecond)
	acquire("b", true, "a's last renewal ended")
	acquire("a", false, "a lost its slot, and b holds the only one")
	require.NoError(t, s.Release(ctx, "k", "b"))
	acquire("a", true, "a slot is free again")
}

// TestSlotsOutliveShortLeases: an instance with a shorter SlotLease (a
// rolling change of it) does not cut short the set that holds the other
// instances' longer leases.
func TestSlotsOutliveShortLeases(t *testing.T) {
	client := redistest.Start(t).Client()
	s := newStore(t, client, nil)
	ctx := context.Background()
	ok, err := s.Acquire(ctx, "k", "long", 2, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.Acquire(ctx, "k", "short", 2, time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	ttl, err := client.PTTL(ctx, "ratelimit::inflight:k").Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 50*time.Second, "the set lives as long as its longest lease")
}
