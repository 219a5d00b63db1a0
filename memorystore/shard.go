package memorystore

import (
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
	"github.com/tokenfair/ratelimit/internal/credit"
)

// shard is one part of the store. Its first cache line is read by every
// decision and written only when the table is replaced, when the shard is
// tidied, when two decisions race and when a key of a new limit comes; the
// second is written by the holders of its lock.
type shard struct {
	tab         atomic.Pointer[table] // nil until the first key
	tidyAt      atomic.Int64          // the store's time from which a decision tidies
	lockedUntil atomic.Int64          // the store's time until which decisions take the lock
	spans       []int64               // the span of each kind from firstSpan on (under mu; see kind)
	_           [16]byte

	mu            sync.Mutex               // held to fill, kill or replace slots
	live, used    int                      // live slots, and slots filled (live or dead), in tab
	globals, bans int                      // live slots of kind kindGlobal, and of kind kindBan
	next          uint64                   // where tidy looks next (taken modulo the table's length)
	credits       map[uint64]credit.Bucket // of each credited bucket, by its word's id (under mu)
	quotas        *[]ratelimit.Limit       // the calendar quotas of the kinds whose span is negative (under mu)
}

// tidyEvery is how often, in the store's time, a shard that decisions
// reach tidies: at most once per millisecond.
const tidyEvery = int64(1e6)

// keepFull is how long a key is kept after its bucket is full again, so
// that a client that comes back within it finds its slot: tidying and
// rebuilding drop only the keys full for longer. (At the cap, full keys go
// first.)
const keepFull = int64(1e9)

// tidySlots is how many slots one tidy looks at.
const tidySlots = 8

// evictSample is how many keys a full shard looks at to make room.
const evictSample = 8

// The kinds of bucket, which say what the cap may do with them: the kinds
// below firstSpan are never evicted; a bucket of kind k ≥ firstSpan is
// ranked by its span, the shard's spans[k-firstSpan] (see kind and rank).
const (
	// kindGlobal is a Global policy's bucket, one per policy: never
	// evicted, and not counted in the cap.
	kindGlobal uint8 = 1
	// kindBan is a penalty box's ban: never evicted.
	kindBan uint8 = 2

	firstSpan = 3
	maxSpans  = 128 - firstSpan // the top bit of the word is credited
)

// kind returns the kind of p's buckets, adding its span to the shard's
// spans if it is new. A span is what ranks the buckets of a kind at the
// cap: for a rate, burst × interval, the time an empty bucket takes to
// fill; for a calendar quota, whose tokens all come back at its period's
// end, the quota itself, as -1 - its index in the shard's quotas. A shard
// that already has maxSpans spans gives p the kind of the nearest (a
// quota's, the nearest quota's). The shard is locked.
func (sh *shard) kind(p *ratelimit.Policy) uint8 {
	switch {
	case p.Global:
		return kindGlobal
	case p.Algorithm == algo.Ban:
		return kindBan
	}
	span := p.Limit.Burst() * int64(p.Limit.Interval())
	if span == 0 {
		return sh.quotaKind(p.Limit)
	}
	if i := slices.Index(sh.spans, span); i >= 0 {
		return uint8(firstSpan + i)
	}
	if len(sh.spans) < maxSpans {
		sh.spans = append(sh.spans, span)
		return uint8(firstSpan + len(sh.spans) - 1)
	}
	return sh.nearest(float64(span), func(s int64) (float64, bool) { return float64(s), s > 0 })
}

// quotaKind is kind for a calendar quota's limit l.
func (sh *shard) quotaKind(l ratelimit.Limit) uint8 {
	for i, s := range sh.spans {
		if s < 0 && (*sh.quotas)[-1-s] == l {
			return uint8(firstSpan + i)
		}
	}
	if len(sh.spans) < maxSpans {
		if sh.quotas == nil {
			sh.quotas = new([]ratelimit.Limit)
		}
		*sh.quotas = append(*sh.quotas, l)
		sh.spans = append(sh.spans, int64(-len(*sh.quotas)))
		return uint8(firstSpan + len(sh.spans) - 1)
	}
	return sh.nearest(float64(l.Burst()), func(s int64) (float64, bool) {
		if s >= 0 {
			return 0, false
		}
		return float64((*sh.quotas)[-1-s].Burst()), true
	})
}

// nearest returns the kind whose size (of its span s, if of) is nearest
// size, in ratio; the first if none is.
func (sh *shard) nearest(size float64, of func(s int64) (float64, bool)) uint8 {
	near, best := 0, math.Inf(1)
	for i, s := range sh.spans {
		if x, ok := of(s); ok {
			if d := math.Abs(math.Log(x / size)); d < best {
				near, best = i, d
			}
		}
	}
	return uint8(firstSpan + near)
}

// room makes room for one more key counted in the cap, evicting keys if
// the shard is at the cap, and reports whether it could: false when the
// shard holds only keys it must not evict (globals and bans in force). The
// shard is locked, and its only busy slots are a batch's, which stay
// (eviction passes over them).
func (sh *shard) room(from uint64, now int64, perShard int) bool {
	for sh.live-sh.globals >= perShard {
		if !sh.evict(from, now) {
			return false
		}
	}
	return true
}

// insert adds fp, which has no live slot, with state, as a bucket of p,
// rebuilding the table first when it would be more than 3/4 filled. It
// does not look at the cap (see room). The shard is locked and no slot of
// it is busy.
func (sh *shard) insert(fp uint64, state, now int64, p *ratelimit.Policy) {
	t := sh.tab.Load()
	if t == nil {
		t = newTable(minSlots)
		sh.tab.Store(t)
	} else if (sh.used+1)*maxLoadDen > len(t.slots)*maxLoadNum {
		t = sh.rebuild(now, 1, len(t.slots)) // an insert never shrinks it
	}
	k := sh.kind(p) // after the rebuild, which renumbers the kinds
	t.put(word(fp, k), state)
	sh.live++
	sh.used++
	sh.count(k, 1)
}

// count adds n to the shard's count of live keys of kind k, if it has one.
func (sh *shard) count(k uint8, n int) {
	switch k {
	case kindGlobal:
		sh.globals += n
	case kindBan:
		sh.bans += n
	}
}

// dropped counts out the live slot whose word was w, which was just killed,
// and forgets its credit.
func (sh *shard) dropped(w uint64) {
	sh.live--
	sh.count(kindOf(w), -1)
	if w&credited != 0 {
		delete(sh.credits, w&idMask)
	}
}

// creditOf returns the credit of the bucket whose slot's word is w. The
// shard is locked.
func (sh *shard) creditOf(w uint64) int64 {
	if w&credited == 0 {
		return 0
	}
	return sh.credits[w&idMask].Credit
}

// idle makes s dead if its bucket carries no information after limit: its
// state plus its credit is at most limit (a full bucket that owes no
// give-back). It reports whether it did, and counts the slot out. The
// shard is locked.
func (sh *shard) idle(s *slot, limit int64) bool {
	w := s.word.Load()
	c := sh.creditOf(w)
	for {
		st := s.state.Load()
		if st == dead || st == busy || st > limit-c {
			return false
		}
		if s.state.CompareAndSwap(st, dead) {
			sh.dropped(w)
			return true
		}
	}
}

// rebuild moves into a new table every live key except those whose bucket
// has been full for keepFull, publishes it and returns it; it keeps only
// the spans of the keys it moves, and renumbers their kinds. The new table
// has at least floor slots, and room for extra more keys at most half
// full. Each old slot dies as its key moves, so a decision that had found
// it either swapped its state in before (and the move carries it) or fails
// and looks again under the lock, in the new table. The shard is locked
// and no slot of it is busy.
func (sh *shard) rebuild(now int64, extra, floor int) *table {
	old := sh.tab.Load()
	keep := now - keepFull
	n := extra
	for i := range old.slots {
		if s := &old.slots[i]; s.word.Load() != 0 && s.state.Load() > keep-sh.creditOf(s.word.Load()) {
			n++
		}
	}
	t := newTable(max(floor, size(n)))
	var renumber [256]uint8 // a kind's new number, 0 until a key of it moves
	var spans []int64
	var quotas []ratelimit.Limit
	sh.live, sh.globals, sh.bans = 0, 0, 0
	for i := range old.slots {
		s := &old.slots[i]
		w := s.word.Load()
		if w == 0 {
			continue
		}
		st, ok := s.kill(math.MaxInt64)
		if !ok {
			continue
		}
		if st <= keep-sh.creditOf(w) {
			if w&credited != 0 {
				delete(sh.credits, w&idMask)
			}
			continue
		}
		if (sh.live+1+extra)*maxLoadDen > len(t.slots)*maxLoadNum {
			t = t.grown() // decisions refilled buckets since the count
		}
		k := kindOf(w)
		if k >= firstSpan {
			if renumber[k] == 0 {
				span := sh.spans[k-firstSpan]
				if span < 0 { // a quota's
					quotas = append(quotas, (*sh.quotas)[-1-span])
					span = int64(-len(quotas))
				}
				spans = append(spans, span)
				renumber[k] = uint8(firstSpan + len(spans) - 1)
			}
			k = renumber[k]
		}
		t.put(word(w, k)|w&credited, st)
		sh.live++
		sh.count(k, 1)
	}
	sh.tab.Store(t)
	sh.spans, sh.quotas = spans, nil
	if quotas != nil {
		sh.quotas = &quotas
	}
	sh.used = sh.live
	return t
}

// grown returns a copy of t, which nobody else sees, twice as long.
func (t *table) grown() *table {
	g := newTable(2 * len(t.slots))
	for i := range t.slots {
		if w := t.slots[i].word.Load(); w != 0 {
			g.put(w, t.slots[i].state.Load())
		}
	}
	return g
}

// evict drops at least one key to make room, and reports whether it could.
// It looks at a sample of the live keys from slot from on (more, if the
// sample holds no key it may evict), and drops those whose bucket is full
// (state at most now); if there are none, it evicts the sampled key whose
// bucket is closest to full relative to its span (see rank). It never
// evicts a global bucket or a ban, and passes over busy slots; it returns
// false when it finds nothing else in the whole table. from should be
// random (the new key's fingerprint is), so that the sample is. The shard
// is locked.
func (sh *shard) evict(from uint64, now int64) bool {
	t := sh.tab.Load()
	if t == nil {
		return false
	}
	for i := from; ; {
		var victim *slot
		var victimState int64
		var victimKind uint8
		live := sh.live
		dropped, seen := 0, 0
		// The sample, and more while it holds nothing to evict and the
		// shard does.
		for ; seen < min(evictSample, live) || seen < live && dropped == 0 && victim == nil && sh.live > sh.globals+sh.bans; i++ {
			s := &t.slots[i&t.mask]
			st := s.state.Load()
			w := s.word.Load()
			if w == 0 || st == dead {
				continue
			}
			seen++
			if st == busy { // a batch's slot, which stays
			} else if sh.idle(s, now) {
				dropped++
			} else if k := kindOf(w); k >= firstSpan && (victim == nil || sh.fuller(st, k, victimState, victimKind, now)) {
				victim, victimState, victimKind = s, st, k
			}
		}
		if dropped > 0 {
			return true
		}
		if victim == nil {
			return false
		}
		w := victim.word.Load()
		if _, ok := victim.kill(victimState); ok {
			sh.dropped(w)
			return true
		}
		// A decision changed the victim meanwhile: sample again.
	}
}

// fuller reports whether a bucket of kind a with state sa is closer to full
// at now, relative to its limit, than one of kind b with state sb, exactly
// (see rank). Both kinds are ranked (at least firstSpan).
func (sh *shard) fuller(sa int64, a uint8, sb int64, b uint8, now int64) bool {
	if a == b {
		return sa < sb // (of a quota too: the same period's end)
	}
	return sh.fullerRanked(sa, a, sb, b, now)
}

// fullerRanked is fuller for buckets of two kinds.
func (sh *shard) fullerRanked(sa int64, a uint8, sb int64, b uint8, now int64) bool {
	na, da := sh.rank(sa, a, now)
	nb, db := sh.rank(sb, b, now)
	hi1, lo1 := bits.Mul64(na, db)
	hi2, lo2 := bits.Mul64(nb, da)
	return hi1 < hi2 || hi1 == hi2 && lo1 < lo2
}

// rank returns how far at now a bucket of kind k with state st is from
// full, relative to its limit: the share of it that evicting the bucket
// gives back, num ÷ den. For a rate, its time to full ÷ its span; for a
// calendar quota, the tokens spent in the period that holds now (the
// state's distance past the period's end) ÷ its count.
func (sh *shard) rank(st int64, k uint8, now int64) (num, den uint64) {
	span := sh.spans[k-firstSpan]
	if span > 0 {
		return uint64(max(st-now, 0)), uint64(span)
	}
	q := &(*sh.quotas)[-1-span]
	_, end := q.Period(time.Unix(0, now))
	return uint64(max(st-end.UnixNano(), 0)), uint64(q.Burst())
}

// tidy looks at the next slots from where the last tidy stopped, drops the
// keys whose bucket has been full for keepFull, and rebuilds the table
// smaller when less than 1/8 of it is live. Successive calls go round the
// whole table. The shard is locked and no slot of it is busy.
func (sh *shard) tidy(now int64) {
	sh.tidyAt.Store(now + tidyEvery)
	t := sh.tab.Load()
	if t == nil {
		return
	}
	for range tidySlots {
		s := &t.slots[sh.next&t.mask]
		sh.next++
		if s.word.Load() != 0 {
			sh.idle(s, now-keepFull)
		}
	}
	if len(t.slots) > minSlots && sh.live*8 < len(t.slots) {
		sh.rebuild(now, 0, minSlots)
	}
}
