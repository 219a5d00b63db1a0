package memorystore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/storetest"
)

// Reset makes the bucket full in its slot and keeps what it owed as
// credit, so that a give-back of an earlier take credits nothing; the slot
// goes once the credit has run out, and a bucket that owed nothing goes at
// once.
func TestResetKeepsTheCredit(t *testing.T) {
	c := new(storetest.Clock)
	s := newStore(t, &Options{Clock: c.Now, Shards: 1})
	ctx := context.Background()
	took, _ := s.Take(ctx, &p, "a", 4) // p: 5 per second, burst 10: 800 ms owed
	_, _ = s.Take(ctx, &p, "b", 2)
	require.Equal(t, 2, s.Len())
	sh := &s.shards[0]
	fp := s.fingerprint(p.Name, "a")
	sl := sh.tab.Load().lookup(fp)
	require.NotNil(t, sl)

	require.NoError(t, s.Reset(ctx, &p, "a"))
	assert.Equal(t, c.Now().UnixNano(), sl.state.Load(), "a is full")
	assert.Equal(t, int64(800*time.Millisecond), sh.creditOf(sl.word.Load()), "what a owed is its credit")
	require.NoError(t, s.Refund(ctx, &p, "a", 4, took))
	res, _ := s.Take(ctx, &p, "a", 1)
	assert.Equal(t, int64(9), res.Remaining, "a starts full, and the take before the reset gave nothing back")
	assert.Same(t, sl, sh.tab.Load().lookup(fp), "in its slot")
	res, _ = s.Take(ctx, &p, "b", 0)
	assert.Equal(t, int64(8), res.Remaining, "b untouched")

	// The slot goes once its state plus its credit has passed, and keepFull.
	c.Advance(200*time.Millisecond + 800*time.Millisecond + time.Duration(keepFull) + 1)
	sh.mu.Lock()
	sh.rebuild(c.Now().UnixNano(), 0, minSlots)
	sh.mu.Unlock()
	assert.Nil(t, sh.tab.Load().lookup(fp), "a forgotten")

	_, _ = s.Take(ctx, &p, "c", 0) // a look keeps nothing
	require.NoError(t, s.Reset(ctx, &p, "c"))
	require.NoError(t, s.Reset(ctx, &p, "never-seen"))
	require.NoError(t, newStore(t, nil).Reset(ctx, &p, "k"), "a shard without a table")
	assert.Equal(t, 0, s.Len(), "b full and gone, c and never-seen never kept")
}

// TestResetUnderConcurrentTraffic resets buckets, some of them while other
// goroutines decide on them, under decisions on many other keys of the
// same shard, whose inserts grow the table and whose dead slots make it
// rebuild, all against a clock that stands still: every other key must
// have spent exactly what it was admitted, so no reset changed or lost
// another key's state. It runs as the store is and with the contended
// lock off, so that decisions race by compare-and-swap alone.
func TestResetUnderConcurrentTraffic(t *testing.T) {
	asIsAndLockFree(t, testResetUnderConcurrentTraffic)
}

func testResetUnderConcurrentTraffic(t *testing.T) {
	const (
		keys, workers, rounds = 300, 4, 6
		burst                 = 1000
		resets                = 400
	)
	c := new(storetest.Clock)
	s := newStore(t, &Options{Clock: c.Now, Shards: 1})
	pol := &ratelimit.Policy{Name: "p", Limit: ratelimit.Per(burst, time.Hour)}
	ctx := context.Background()
	var admitted [keys]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				for i := range keys {
					k := (i*7 + w + r) % keys
					if res, _ := s.Take(ctx, pol, fmt.Sprint("key-", k), 1); res.Allowed {
						admitted[k].Add(1)
					}
				}
			}
		}()
	}
	// A bucket that one goroutine spends from while another resets it.
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range resets {
			_, _ = s.Take(ctx, pol, "shared", 3)
		}
	}()
	go func() {
		defer wg.Done()
		for i := range resets {
			_ = s.Reset(ctx, pol, "shared")
			// Buckets spent and reset at once: each leaves a dead slot.
			victim := fmt.Sprint("victim-", i)
			_, _ = s.Take(ctx, pol, victim, 5)
			_ = s.Reset(ctx, pol, victim)
		}
	}()
	wg.Wait()

	for k := range keys {
		key := fmt.Sprint("key-", k)
		require.Equal(t, int64(workers*rounds), admitted[k].Load(), "%s: admitted", key)
		res, _ := s.Take(ctx, pol, key, 0)
		require.Equal(t, burst-admitted[k].Load(), res.Remaining, "%s: tokens left", key)
	}
	for i := range resets {
		res, _ := s.Take(ctx, pol, fmt.Sprint("victim-", i), 0)
		require.Equal(t, int64(burst), res.Remaining, "victim-%d: reset after its one take", i)
	}
	require.NoError(t, s.Reset(ctx, pol, "shared"))
	assert.Equal(t, keys+resets+1, s.Len(), "the other keys, and the reset ones while their credit lasts")
	res, _ := s.Take(ctx, pol, "shared", 0)
	assert.Equal(t, int64(burst), res.Remaining)
}
