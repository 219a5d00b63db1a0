package ratelimit

import (
	"math/bits"
	"sync/atomic"
)

// recent remembers the values of the keys seen lately, so that a key
// function does its work (a hash, a parse) once per client, not once per
// request. Each key may sit in either of two slots chosen by its 64-bit
// hash, so that a few thousand clients rarely evict each other. It is safe
// for concurrent use: a hit writes nothing, a miss writes one slot.
type recent[K comparable, V any] struct {
	slots [2048]atomic.Pointer[recentEntry[K, V]]
}

type recentEntry[K comparable, V any] struct {
	k K
	v V
}

// get returns the value of k, whose hash is h, if it is remembered.
func (c *recent[K, V]) get(k K, h uint64) (V, bool) {
	a, b := c.where(h)
	if e := a.Load(); e != nil && e.k == k {
		return e.v, true
	}
	if e := b.Load(); e != nil && e.k == k {
		return e.v, true
	}
	var zero V
	return zero, false
}

// put remembers v as the value of k, whose hash is h, in the first empty
// one of its two slots; when both are taken it evicts the entry of the slot
// that h's low bit picks (b for an even h, a for an odd one). That victim is
// neither the oldest nor the least used: keeping either would need a shared
// write on every hit, which this cache exists to avoid, and the low bit
// spreads evictions over both slots at no cost. Any victim is safe, because
// an entry is only a memo of what the caller can compute again from the key
// (a miss costs that work, never a wrong answer): entries are immutable and
// swapped whole, and get compares the key before it trusts a value, so a
// reader racing with put sees the old entry, the new one, or a miss. Two
// puts racing on one slot lose one entry, which is another such miss.
func (c *recent[K, V]) put(k K, h uint64, v V) {
	a, b := c.where(h)
	if a.Load() != nil && (b.Load() == nil || h&1 == 0) {
		a = b
	}
	a.Store(&recentEntry[K, V]{k, v})
}

// where returns the two slots of the hash h.
func (c *recent[K, V]) where(h uint64) (a, b *atomic.Pointer[recentEntry[K, V]]) {
	n := uint64(len(c.slots))
	return &c.slots[h%n], &c.slots[bits.RotateLeft64(h, 32)%n]
}
