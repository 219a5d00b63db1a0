//go:build !race

package memorystore

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeyFlood sends 10 000 000 distinct keys through a store capped at
// 100 000 keys: it never holds more, and its heap stays within the cap's
// worth of memory. (Without the race detector, which would make it slow:
// ./scripts/test runs it on its own.)
func TestKeyFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("10 000 000 requests")
	}
	const keys, limit = 10_000_000, 100_000
	s := newStore(t, &Options{MaxKeys: limit})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	buf := []byte("ip:")
	ctx := context.Background()
	peak := uint64(0)
	for i := range keys {
		key := string(strconv.AppendInt(buf[:3], int64(i), 10))
		res, err := s.Take(ctx, &p, key, 1)
		require.NoError(t, err)
		require.True(t, res.Allowed, "a new key is always admitted")
		if i%1_000_000 == 0 {
			var m runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
		}
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	peak = max(peak, after.HeapAlloc)
	assert.LessOrEqual(t, s.Len(), limit)
	growth := int64(peak) - int64(before.HeapAlloc)
	t.Logf("%d keys held; heap grew by %.1f MB at most (%.0f bytes per held key)", s.Len(), float64(growth)/1e6, float64(growth)/float64(s.Len()))
	assert.Less(t, growth, int64(8_000_000), "100 000 slots of 16 bytes, at least a quarter of the tables empty, a table being copied as it grows")
}
