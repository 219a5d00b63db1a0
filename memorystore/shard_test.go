package memorystore

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkShard asserts that sh holds exactly model, each key in one live slot
// that a lookup finds, that its counts are right, that its table is at most
// 3/4 filled. It adds the table's dead slots to killed.
func checkShard(t *testing.T, sh *shard, model map[uint64]int64, killed map[*slot]bool) {
	t.Helper()
	tb := sh.tab.Load()
	live, used := 0, 0
	seen := map[uint64]bool{}
	for i := range tb.slots {
		s := &tb.slots[i]
		fp, st := s.fp.Load(), s.state.Load()
		switch {
		case fp == 0:
			require.Zero(t, st, "an empty slot has a state")
		case st == dead:
			used++
			killed[s] = true
		default:
			used++
			live++
			require.False(t, seen[fp], "fingerprint %#x live twice", fp)
			seen[fp] = true
			require.Equal(t, model[fp], st, "fingerprint %#x", fp)
		}
	}
	require.Equal(t, len(model), live)
	require.Equal(t, live, sh.live)
	require.Equal(t, used, sh.used)
	require.LessOrEqual(t, used*maxLoadDen, len(tb.slots)*maxLoadNum)
	for fp := range model {
		s := tb.lookup(fp)
		require.NotNil(t, s, "fingerprint %#x lost", fp)
		require.Equal(t, model[fp], s.state.Load(), "fingerprint %#x found with another's state", fp)
	}
}

// checkKilled asserts that every slot in killed is still dead.
func checkKilled(t *testing.T, killed map[*slot]bool) {
	t.Helper()
	for s := range killed {
		require.Equal(t, int64(dead), s.state.Load(), "a dead slot came back")
	}
}

// forget deletes from model the keys sh no longer holds, checking that each
// was allowed to go: full for keepFull at now (full at now, with full),
// or, with one, a single other key. It looks only if the shard holds fewer
// keys than want or has a new table since was.
func forget(t *testing.T, sh *shard, model map[uint64]int64, want int, was *table, now int64, full bool, one bool) {
	t.Helper()
	if sh.live == want && sh.tab.Load() == was {
		return
	}
	gone := 0
	limit := now - keepFull
	if full {
		limit = now
	}
	for fp, st := range model {
		if sh.tab.Load().lookup(fp) == nil {
			if st > limit {
				require.True(t, one, "fingerprint %#x, state %d, dropped at %d", fp, st, now)
				gone++
			}
			delete(model, fp)
		}
	}
	require.LessOrEqual(t, gone, 1, "more than one key evicted")
}

// TestShardAgainstMap runs random inserts, decisions, evictions, tidies and
// rebuilds on one shard against a map. Fingerprints share a few home
// slots, so probe sequences are long and wrap around the end of the table.
func TestShardAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 40 {
		var sh shard
		model := map[uint64]int64{}
		dead := map[*slot]bool{}
		homes := uint64(1 + round%7)
		perShard := 1 << 30
		if round%2 == 1 {
			perShard = 20
		}
		for i := range 800 {
			fp := rng.Uint64()<<16 | (^uint64(0)-rng.Uint64N(homes))&0xffff
			now := rng.Int64N(3 * keepFull)
			switch op := rng.IntN(10); {
			case op < 6:
				state := 1 + rng.Int64N(4*keepFull)
				if s := sh.tab.Load().lookup(fp); s != nil {
					require.True(t, s.state.CompareAndSwap(model[fp], state))
				} else {
					before, was := sh.live, sh.tab.Load()
					sh.insert(fp, state, now, perShard)
					forget(t, &sh, model, before+1, was, now, before >= perShard, before >= perShard)
				}
				model[fp] = state
			case op < 8 && sh.live > 0:
				before := sh.live
				sh.evict(fp, now)
				require.Less(t, sh.live, before, "evict makes room")
				forget(t, &sh, model, -1, nil, now, true, true)
			case sh.tab.Load() != nil:
				before, was := sh.live, sh.tab.Load()
				sh.tidy(now)
				if sh.tab.Load() == was { // (else it shrank the table, dropping every key full for keepFull)
					require.LessOrEqual(t, before-sh.live, tidySlots, "tidy does bounded work")
				}
				forget(t, &sh, model, before, was, now, false, false)
			}
			if tb := sh.tab.Load(); tb != nil && (len(tb.slots) <= 64 || i%64 == 0) {
				checkShard(t, &sh, model, dead) // (every time while small: it reads every slot)
			}
		}
		checkKilled(t, dead) // a slot's state never comes back
	}
}

// TestEvictsTheFullestSampled: with no full bucket in the sample, the key
// closest to a full bucket (the smallest state) goes; a full one goes
// first.
func TestEvictsTheFullestSampled(t *testing.T) {
	var sh shard
	for fp, state := range map[uint64]int64{1: 50, 2: 30, 3: 40} {
		sh.insert(fp, state, 0, 10)
	}
	sh.evict(0, 10)
	assert.Nil(t, sh.tab.Load().lookup(2))
	assert.Equal(t, 2, sh.live)

	sh.insert(4, 5, 0, 10) // full at 10
	sh.evict(0, 10)
	assert.Nil(t, sh.tab.Load().lookup(4), "a full bucket goes first")
	assert.NotNil(t, sh.tab.Load().lookup(1))
	assert.NotNil(t, sh.tab.Load().lookup(3))
	assert.Equal(t, 2, sh.live)
}

// TestTidyGoesRound: wherever its cursor starts, tidy finds a key full for
// keepFull within one round of the table, len(slots)/tidySlots calls, and
// keeps the rest.
func TestTidyGoesRound(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const now = 10 * keepFull
	for range 50 {
		var sh shard
		for range 600 {
			sh.insert(rng.Uint64()|1, now, 0, 1<<30) // full at now, not for keepFull
		}
		gone := rng.Uint64() | 1
		sh.insert(gone, now-keepFull, 0, 1<<30)
		sh.next = rng.Uint64()
		for range len(sh.tab.Load().slots) / tidySlots {
			sh.tidy(now)
		}
		assert.Nil(t, sh.tab.Load().lookup(gone), "a key full for keepFull still held")
		require.Equal(t, 600, sh.live)
		assert.Equal(t, now+tidyEvery, sh.tidyAt.Load())
	}
}

// TestShrinks: tidying a table that is left nearly empty gives the memory
// back, a bounded amount of work at a time.
func TestShrinks(t *testing.T) {
	var sh shard
	for fp := uint64(1); fp <= 10_000; fp++ {
		sh.insert(fp*0x9e3779b97f4a7c15|1, int64(fp), 0, 1<<30)
	}
	big := len(sh.tab.Load().slots)
	now := 9_990 + keepFull // all but 10 full for keepFull
	sh.tidy(now)
	require.GreaterOrEqual(t, sh.live, 10_000-tidySlots, "one call drops at most tidySlots keys")
	for calls := 1; sh.live > 10; calls++ {
		require.LessOrEqual(t, calls, big/tidySlots, "more than one round of the table")
		sh.tidy(now)
	}
	require.Less(t, len(sh.tab.Load().slots), big/100)
	require.GreaterOrEqual(t, len(sh.tab.Load().slots), minSlots)
}

// TestRebuildDropsLongFullBeforeGrowing: a table about to be filled past
// 3/4 is rebuilt without the keys full for keepFull and the dead slots,
// and grows only if it is still more than half full.
func TestRebuildDropsLongFullBeforeGrowing(t *testing.T) {
	var sh shard
	for fp := uint64(1); fp <= 6; fp++ { // 6 of 8 slots: the next insert rebuilds
		sh.insert(fp*0x9e3779b97f4a7c15|1, 5, 0, 1<<30)
	}
	first := sh.tab.Load()
	require.Len(t, first.slots, minSlots)
	sh.insert(99, 50+keepFull, 5+keepFull, 1<<30) // all six full for keepFull
	assert.NotSame(t, first, sh.tab.Load(), "rebuilt")
	assert.Len(t, sh.tab.Load().slots, minSlots, "grew over idle keys")
	for i := range first.slots {
		if first.slots[i].fp.Load() != 0 {
			assert.Equal(t, int64(dead), first.slots[i].state.Load(), "an old slot left alive")
		}
	}
	checkShard(t, &sh, map[uint64]int64{99: 50 + keepFull}, map[*slot]bool{})

	for fp := uint64(1); fp <= 6; fp++ { // not full at 10: 7 of 8
		sh.insert(fp*0x9e3779b97f4a7c15|1, 50, 10, 1<<30)
	}
	assert.Len(t, sh.tab.Load().slots, 2*minSlots, "a table of live keys grows")
	assert.Equal(t, 7, sh.live)
}
