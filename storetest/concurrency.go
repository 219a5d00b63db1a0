package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

func testConcurrentOneKey(t *testing.T, c *Clock, s ratelimit.Store) {
	concurrentOneKey(t, s, policy("p", ratelimit.PerSecond(1).WithBurst(1000)), 1000)
}

func testShapeConcurrent(t *testing.T, c *Clock, s ratelimit.Store) {
	// One request runs at once and a full queue waits behind it.
	concurrentOneKey(t, s, shape("p", ratelimit.PerSecond(1).WithBurst(1000)), 1001)
}

// concurrentOneKey: in each of several rounds, goroutines released at
// once race for a fresh key; exactly want requests are admitted. A store
// whose read and write of a bucket are not one atomic step admits more in
// some round.
func concurrentOneKey(t *testing.T, s ratelimit.Store, p *ratelimit.Policy, want int64) {
	const rounds, goroutines, each = 4, 8, 150
	for round := range rounds {
		key := fmt.Sprint("hot-", round)
		var admitted atomic.Int64
		race(t, goroutines, func(int) error {
			for range each {
				res, err := s.Take(context.Background(), p, key, 1)
				if err != nil {
					return fmt.Errorf("Take(%q): %w", key, err)
				}
				if res.Allowed {
					admitted.Add(1)
				}
			}
			return nil
		})
		require.Equal(t, want, admitted.Load(), "round %d: %d goroutines × %d requests on one key: %v", round, goroutines, each, p.Limit)
	}
}

// race runs f(0), …, f(n−1) in goroutines released at once, waits for
// them all, and fails the test with the first error one returned.
func race(t *testing.T, n int, f func(g int) error) {
	t.Helper()
	var first atomic.Pointer[error]
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := f(g); err != nil {
				first.CompareAndSwap(nil, &err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if err := first.Load(); err != nil {
		require.NoError(t, *err)
	}
}

func testConcurrentManyKeys(t *testing.T, c *Clock, s ratelimit.Store) {
	p := policy("p", ratelimit.PerSecond(1).WithBurst(5))
	const keys, goroutines = 20, 4
	counts := make([]atomic.Int64, keys)
	race(t, goroutines, func(g int) error {
		for i := range keys * 10 {
			k := (i + g) % keys
			res, err := s.Take(context.Background(), p, fmt.Sprint("key-", k), 1)
			if err != nil {
				return fmt.Errorf("Take(key-%d): %w", k, err)
			}
			if res.Allowed {
				counts[k].Add(1)
			}
		}
		return nil
	})
	for k := range counts {
		assert.Equal(t, int64(5), counts[k].Load(), "key-%d", k)
	}
}
