package ratelimit_test

import (
	"fmt"
	"hash/fnv"
	"hash/maphash"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/occupancy"
	"github.com/tokenfair/ratelimit/memorystore"
)

// observedHash returns the Event.KeyHash of a request from addr through a
// new Middleware keyed by KeyByIP.
func observedHash(t *testing.T, addr string) uint64 {
	t.Helper()
	byIP, err := ratelimit.KeyByIP(nil)
	require.NoError(t, err)
	var got uint64
	h := newHarness(t, setup{limit: ratelimit.PerSecond(5), key: byIP, opts: &ratelimit.MiddlewareOptions{Observe: func(_ *http.Request, e ratelimit.Event) { got = e.KeyHash }}})
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = addr + ":4000"
	h.handle(r)
	require.NotZero(t, got, "the request had a key")
	return got
}

// Within a process a key has one Event.KeyHash, in every Middleware; two
// keys have two.
func TestKeyHashStableInProcess(t *testing.T) {
	a := observedHash(t, "203.0.113.77")
	assert.Equal(t, a, observedHash(t, "203.0.113.77"), "another Middleware, the same hash")
	assert.NotEqual(t, a, observedHash(t, "203.0.113.78"))
}

// Another process gives the same key another Event.KeyHash: its seed is
// made per process.
func TestKeyHashPerProcess(t *testing.T) {
	if os.Getenv("RATELIMIT_KEYHASH_CHILD") == "1" {
		fmt.Printf("keyhash=%d\n", observedHash(t, "203.0.113.77"))
		return
	}
	child := func() uint64 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKeyHashPerProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "RATELIMIT_KEYHASH_CHILD=1")
		out, err := cmd.Output()
		require.NoError(t, err, "%s", out)
		_, after, ok := strings.Cut(string(out), "keyhash=")
		require.True(t, ok, "the child's output: %s", out)
		h, err := strconv.ParseUint(strings.Fields(after)[0], 10, 64)
		require.NoError(t, err)
		return h
	}
	one, two := child(), child()
	mine := observedHash(t, "203.0.113.77")
	assert.NotEqual(t, mine, one, "this process and another")
	assert.NotEqual(t, one, two, "two other processes")
}

// A reader of the logs who sees the Event.KeyHash of an IP key cannot find
// the address by hashing every address of its /24 with the public
// functions: KeyByIP's key of each, hashed by FNV-1a (the unkeyed hash
// KeyHash was) or by hash/maphash under a seed of its own.
func TestKeyHashNotEnumerable(t *testing.T) {
	seen := observedHash(t, "203.0.113.77")
	byIP, err := ratelimit.KeyByIP(nil)
	require.NoError(t, err)
	guess := maphash.MakeSeed()
	found := []string{}
	for i := range 256 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "203.0.113." + strconv.Itoa(i) + ":4000"
		key, err := byIP(r)
		require.NoError(t, err)
		f := fnv.New64a()
		f.Write([]byte(key))
		if f.Sum64() == seen || maphash.String(guess, key) == seen {
			found = append(found, key)
		}
	}
	assert.Empty(t, found, "the addresses whose hash is the observed one")
}

// TestOccupancy: a limiter's occupancy (internal/occupancy, which
// otellimit reads) counts the requests that wait in its shaping queues,
// with MaxQueued's bound or without, and those that hold an in-flight
// slot, their wait included, until they leave.
func TestOccupancy(t *testing.T) {
	for _, maxQueued := range []int{0, -1} {
		t.Run(fmt.Sprint("MaxQueued=", maxQueued), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store, err := memorystore.New(nil)
				require.NoError(t, err)
				lim, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(1).WithBurst(10), Algorithm: ratelimit.LeakyShape})
				require.NoError(t, err)
				occ := occupancy.Of(lim)
				require.NotNil(t, occ)
				assert.Nil(t, occupancy.Of("not a limiter"))
				release := make(chan struct{})
				mw, err := ratelimit.NewMiddleware(lim, func(*http.Request) (string, error) { return "k", nil },
					&ratelimit.MiddlewareOptions{MaxQueued: maxQueued, MaxInFlight: 3, Quiet: true})
				require.NoError(t, err)
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mw.Handle(w, r, func(*http.Request) (int, int64) { <-release; return 200, 0 })
				})
				counts := func() [2]int64 { return [2]int64{occ.Queued.Load(), occ.InFlight.Load()} }

				var wg sync.WaitGroup
				serve := func() { wg.Go(func() { h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) }) }
				serve()
				synctest.Wait()
				assert.Equal(t, [2]int64{0, 1}, counts(), "the first runs")
				serve()
				synctest.Wait()
				assert.Equal(t, [2]int64{1, 2}, counts(), "the second waits its turn, holding its slot")
				time.Sleep(time.Second)
				synctest.Wait()
				assert.Equal(t, [2]int64{0, 2}, counts(), "its turn came")
				close(release)
				wg.Wait()
				assert.Equal(t, [2]int64{0, 0}, counts())
			})
		})
	}
}
