package ratelimit

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// heapStore is not zero-sized, so each one has its own address.
type heapStore struct{ n int }

func (*heapStore) Take(context.Context, Policy, string, int64) (Result, error) {
	return Result{}, nil
}

func TestCheckSharedForgetsCollectedStores(t *testing.T) {
	entries := func() (n int) {
		limitsByStore.Range(func(k, _ any) bool {
			if k.(storePolicy).name == "forgotten" {
				n++
			}
			return true
		})
		return n
	}
	for range 10 {
		l, err := New(&heapStore{}, Policy{Name: "forgotten", Limit: PerSecond(1)})
		require.NoError(t, err)
		checkShared(l, nil)
	}
	require.Positive(t, entries())
	assert.Eventually(t, func() bool {
		runtime.GC()
		return entries() == 0
	}, 5*time.Second, time.Millisecond, "a collected store's entries go with it")
}
