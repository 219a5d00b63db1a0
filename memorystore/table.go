package memorystore

// table is an open-addressing hash table from a 64-bit fingerprint of
// (policy, key) to that bucket's state: 16 bytes a slot, no pointers (so the
// garbage collector never scans it), linear probing, and deletion by
// shifting the following entries back, so there are no tombstones and a
// lookup stops at the first empty slot. The caller holds the shard's lock.
type table struct {
	slots []slot // a power of two long, or empty
	n     int    // occupied slots
	next  int    // where tidy looks next (taken modulo len(slots))
}

// slot holds one bucket. A fingerprint of 0 marks an empty slot
// (fingerprints are never 0).
type slot struct {
	fp    uint64
	state int64
}

const (
	minSlots = 8
	// A table grows when it would be more than 3/4 full, and tidy shrinks
	// it when it is less than 1/8 full.
	maxLoadNum, maxLoadDen = 3, 4
)

// find returns the index of fp's slot, and whether fp is there; if not, the
// index is where it would go. The table must not be full.
func (t *table) find(fp uint64) (int, bool) {
	mask := uint64(len(t.slots) - 1)
	for i := fp & mask; ; i = (i + 1) & mask {
		switch t.slots[i].fp {
		case fp:
			return int(i), true
		case 0:
			return int(i), false
		}
	}
}

// get returns fp's state and slot index, or 0 (a full bucket) and -1.
func (t *table) get(fp uint64) (int64, int) {
	if len(t.slots) == 0 {
		return 0, -1
	}
	if i, ok := t.find(fp); ok {
		return t.slots[i].state, i
	}
	return 0, -1
}

// insert adds fp, which is not in the table, with state.
func (t *table) insert(fp uint64, state, now int64) {
	if (t.n+1)*maxLoadDen > len(t.slots)*maxLoadNum {
		// Before growing, drop the buckets that are full again; grow only
		// if the table is still more than half full, so that a sweep is
		// followed by at least a quarter of the table's inserts before the
		// next one.
		t.dropFull(now)
		if t.n*2 > len(t.slots) || len(t.slots) == 0 {
			t.resize(max(minSlots, 2*len(t.slots)))
		}
	}
	i, _ := t.find(fp)
	t.slots[i] = slot{fp, state}
	t.n++
}

// remove empties slot i and moves back the entries after it that would
// otherwise be cut off from their home slot.
func (t *table) remove(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].fp != 0; j = (j + 1) & mask {
		// The entry at j may fill the hole at i unless its home slot lies
		// cyclically in (i, j].
		home := int(t.slots[j].fp) & mask
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot{}
	t.n--
}

// resize moves every entry into a table of n slots (a power of two).
func (t *table) resize(n int) {
	old := t.slots
	t.slots = make([]slot, n)
	for _, s := range old {
		if s.fp != 0 {
			i, _ := t.find(s.fp)
			t.slots[i] = s
		}
	}
}

// evictSample is how many keys a full shard looks at to make room.
const evictSample = 8

// evict makes room for one key: it drops the expired keys among a sample of
// the entries from slot from on, or else the sampled key whose bucket is
// closest to full (the smallest state). from should be random (the new key's
// fingerprint is), so that the sample is.
func (t *table) evict(from uint64, now int64) {
	var expired [evictSample]uint64
	dropped, seen := 0, 0
	victim, oldest := uint64(0), int64(0)
	mask, sample := uint64(len(t.slots)-1), min(evictSample, t.n)
	for i := from & mask; seen < sample; i = (i + 1) & mask {
		s := t.slots[i]
		switch {
		case s.fp == 0:
			continue
		case s.state <= now:
			expired[dropped] = s.fp
			dropped++
		case victim == 0 || s.state < oldest:
			victim, oldest = s.fp, s.state
		}
		seen++
	}
	if dropped == 0 {
		expired[0], dropped = victim, 1
	}
	for _, fp := range expired[:dropped] {
		i, _ := t.find(fp)
		t.remove(i)
	}
}

// tidySlots is how many slots one call to tidy looks at.
const tidySlots = 8

// dropFull drops every entry whose bucket is full at now.
func (t *table) dropFull(now int64) {
	for i := 0; i < len(t.slots); {
		if s := t.slots[i]; s.fp != 0 && s.state <= now {
			t.remove(i) // an entry from further on may now be at i: look again
			continue
		}
		i++
	}
}

// tidy looks at the next slots from where the last call stopped, dropping
// the entries whose bucket is full at now, and shrinks the table if it is
// less than 1/8 full. Each call takes tidySlots steps, a step being a move
// to the next slot or a drop (after which the slot is looked at again), so
// successive calls go round the whole table in (len(slots)+drops)/tidySlots
// calls.
func (t *table) tidy(now int64) {
	mask := len(t.slots) - 1
	if mask < 0 {
		return
	}
	i := t.next & mask
	for range tidySlots {
		if s := t.slots[i]; s.fp != 0 && s.state <= now {
			t.remove(i) // an entry from further on may now be at i: look again
			continue
		}
		i = (i + 1) & mask
	}
	t.next = i
	if n := len(t.slots); n > minSlots && t.n*8 < n {
		size := minSlots
		for (t.n+1)*maxLoadDen*2 > size*maxLoadNum { // leave room to grow
			size *= 2
		}
		t.resize(size)
	}
}
