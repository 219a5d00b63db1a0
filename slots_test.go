package ratelimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/nethttp"
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

// slotsServer returns a handler limited by a Middleware over slots with
// opts, keyed by X-Client, whose requests to /wait run until gate closes
// and to /slow for a second, whatever their context.
func slotsServer(t *testing.T, slots ratelimit.SlotStore, gate chan struct{}, opts ratelimit.MiddlewareOptions) http.Handler {
	t.Helper()
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(1000)})
	require.NoError(t, err)
	opts.Slots = slots
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, &opts)
	require.NoError(t, err)
	return nethttp.Wrap(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/wait":
			<-gate
		case "/slow":
			time.Sleep(time.Second)
		}
	}))
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
		api := slotsServer(t, slots, gate, ratelimit.MiddlewareOptions{MaxInFlight: 5, MaxInFlightTotal: 2, SlotLease: lease, SlotName: "api"})
		download := slotsServer(t, slots, gate, ratelimit.MiddlewareOptions{MaxInFlight: 1, MaxInFlightTotal: 10, SlotLease: lease, SlotName: "download"})
		replica := slotsServer(t, slots, gate, ratelimit.MiddlewareOptions{MaxInFlight: 1, MaxInFlightTotal: 10, SlotLease: lease, SlotName: "download"})
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
				h := slotsServer(t, slots, nil, ratelimit.MiddlewareOptions{MaxInFlight: 1, MaxInFlightTotal: 1, SlotLease: lease, SlotName: "upload"})
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
