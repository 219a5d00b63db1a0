package ratelimit_test

import (
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
	"github.com/tokenfair/ratelimit/internal/occupancy"
	"github.com/tokenfair/ratelimit/memorystore"
)

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
