package ratelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
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
// bubble, the bubble's), that records the keys it is asked about.
type memSlots struct {
	mu    sync.Mutex
	slots map[string]map[string]time.Time // key → token → end of its lease
	next  int
}

func (s *memSlots) Acquire(_ context.Context, key string, limit int64, lease time.Duration) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
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
	if int64(len(held)) >= limit {
		return "", false, nil
	}
	s.next++
	token := strconv.Itoa(s.next)
	held[token] = now.Add(lease)
	return token, true, nil
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
// opts, keyed by X-Client, whose requests to /wait run until gate closes.
func slotsServer(t *testing.T, slots ratelimit.SlotStore, gate chan struct{}, opts ratelimit.Options) http.Handler {
	t.Helper()
	lim, err := ratelimit.New(memoryStore(t), ratelimit.Policy{Limit: ratelimit.PerSecond(1000)})
	require.NoError(t, err)
	opts.Slots = slots
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, &opts)
	require.NoError(t, err)
	return nethttp.Middleware(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			<-gate
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
		api := slotsServer(t, slots, gate, ratelimit.Options{MaxInFlight: 5, MaxInFlightTotal: 2, SlotLease: lease, SlotName: "api"})
		download := slotsServer(t, slots, gate, ratelimit.Options{MaxInFlight: 1, MaxInFlightTotal: 10, SlotLease: lease, SlotName: "download"})
		replica := slotsServer(t, slots, gate, ratelimit.Options{MaxInFlight: 1, MaxInFlightTotal: 10, SlotLease: lease, SlotName: "download"})
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
