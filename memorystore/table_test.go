package memorystore

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkTable asserts that t holds exactly model, that every entry is
// reachable from its home slot without crossing an empty one (the invariant
// that lets a lookup stop at the first empty slot), and that it is at most
// 3/4 full.
func checkTable(t *testing.T, tb *table, model map[uint64]int64) {
	t.Helper()
	require.Equal(t, len(model), tb.n)
	held := 0
	mask := len(tb.slots) - 1
	for i, s := range tb.slots {
		if s.fp == 0 {
			continue
		}
		held++
		require.Equal(t, model[s.fp], s.state, "fingerprint %#x", s.fp)
		for j := int(s.fp) & mask; j != i; j = (j + 1) & mask {
			require.NotZero(t, tb.slots[j].fp, "entry %#x at %d is cut off from its home %d by an empty slot at %d", s.fp, i, int(s.fp)&mask, j)
		}
	}
	require.Equal(t, len(model), held)
	require.LessOrEqual(t, tb.n*maxLoadDen, len(tb.slots)*maxLoadNum)
	for fp, state := range model {
		got, i := tb.get(fp)
		require.GreaterOrEqual(t, i, 0, "fingerprint %#x lost", fp)
		require.Equal(t, state, got)
	}
}

// TestTableAgainstMap runs random inserts, updates, removals, evictions and
// tidies against a map. Fingerprints share a few home slots, so clusters
// are long and wrap around the end of the table: the cases where shifting
// entries back after a removal can go wrong.
func TestTableAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 60 {
		var tb table
		model := map[uint64]int64{}
		homes := uint64(1 + round%7)
		for range 1500 {
			// The low bits (the home slot) come from a few values near the
			// end of the table; the high bits keep fingerprints distinct.
			fp := rng.Uint64()<<16 | (^uint64(0)-rng.Uint64N(homes))&0xffff
			now := rng.Int64N(100)
			switch op := rng.IntN(10); {
			case op < 5:
				state := 1 + rng.Int64N(100)
				if _, i := tb.get(fp); i >= 0 {
					tb.slots[i].state = state
				} else {
					tb.insert(fp, state, now)
					for k, v := range model { // growing drops full buckets first
						if _, i := tb.get(k); i < 0 {
							require.LessOrEqual(t, v, now, "only expired keys go")
							delete(model, k)
						}
					}
				}
				model[fp] = state
			case op < 8 && len(model) > 0:
				for k := range model { // a random held key
					_, i := tb.get(k)
					tb.remove(i)
					delete(model, k)
					break
				}
			case op == 8 && len(model) > 0:
				before := tb.n
				tb.evict(fp, now)
				require.Less(t, tb.n, before, "evict makes room")
				for k := range model {
					if _, i := tb.get(k); i < 0 {
						require.True(t, model[k] <= now || before-tb.n == 1, "only expired keys go, or one live one")
						delete(model, k)
					}
				}
			case op == 9:
				before := tb.n
				tb.tidy(now)
				require.LessOrEqual(t, before-tb.n, tidySlots, "tidy does bounded work")
				for k, v := range model {
					if _, i := tb.get(k); i < 0 {
						require.LessOrEqual(t, v, now, "only expired keys go")
						delete(model, k)
					}
				}
			}
			checkTable(t, &tb, model)
		}
	}
}

// TestTableEvictsTheFullestSampled: with no expired key in the sample, the
// key closest to a full bucket (the smallest state) goes.
func TestTableEvictsTheFullestSampled(t *testing.T) {
	var tb table
	for fp, state := range map[uint64]int64{1: 50, 2: 30, 3: 40} {
		tb.insert(fp, state, math.MinInt64)
	}
	tb.evict(0, 10)
	_, i := tb.get(2)
	require.Equal(t, -1, i)
	require.Equal(t, 2, tb.n)

	tb.insert(4, 5, math.MinInt64) // expired at 10, like state 2 would be at 30
	tb.evict(0, 10)
	_, i = tb.get(4)
	require.Equal(t, -1, i, "an expired key goes first")
	require.Equal(t, 2, tb.n)
}

// TestTableTidyGoesRound: wherever its cursor starts, tidy finds an
// expired entry within one round of the table, len(slots)/tidySlots calls.
func TestTableTidyGoesRound(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		var tb table
		for range 600 {
			tb.insert(rng.Uint64()|1, 1000, math.MinInt64)
		}
		expired := rng.Uint64() | 1
		tb.insert(expired, 5, math.MinInt64)
		tb.next = rng.IntN(len(tb.slots))
		for range len(tb.slots) / tidySlots {
			tb.tidy(10)
		}
		_, i := tb.get(expired)
		require.Equal(t, -1, i, "expired entry still held")
		require.Equal(t, 600, tb.n)
	}
}

// TestTableShrinks: tidying a table that is left nearly empty gives the
// memory back, a bounded amount of work at a time.
func TestTableShrinks(t *testing.T) {
	var tb table
	for fp := uint64(1); fp <= 10_000; fp++ {
		tb.insert(fp*0x9e3779b97f4a7c15|1, int64(fp), math.MinInt64)
	}
	big := len(tb.slots)
	tb.tidy(9_990)
	require.GreaterOrEqual(t, tb.n, 10_000-tidySlots, "one call drops at most tidySlots entries")
	for calls := 1; tb.n > 10; calls++ {
		require.LessOrEqual(t, calls, (big+10_000)/tidySlots, "more than one round of the table")
		tb.tidy(9_990)
	}
	require.Less(t, len(tb.slots), big/100)
	require.GreaterOrEqual(t, len(tb.slots), minSlots)
}

// TestTableDropsFullBeforeGrowing: a table about to grow first drops the
// buckets that are full again, and grows only if it is still more than
// half full, so idle keys never make it grow.
func TestTableDropsFullBeforeGrowing(t *testing.T) {
	var tb table
	for fp := uint64(1); fp <= 6; fp++ { // 6 of 8 slots: the next insert would grow
		tb.insert(fp*0x9e3779b97f4a7c15|1, 5, math.MinInt64)
	}
	require.Equal(t, minSlots, len(tb.slots))
	tb.insert(99, 50, 10) // all six are full again at 10
	assert.Equal(t, minSlots, len(tb.slots), "grew over idle keys")
	assert.Equal(t, 1, tb.n)
	checkTable(t, &tb, map[uint64]int64{99: 50})

	for fp := uint64(1); fp <= 5; fp++ { // live at 10: 6 of 8
		tb.insert(fp*0x9e3779b97f4a7c15|1, 50, 10)
	}
	tb.insert(98, 50, 10)
	assert.Equal(t, 2*minSlots, len(tb.slots), "a table of live keys grows")
	assert.Equal(t, 7, tb.n)
}
