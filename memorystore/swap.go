//go:build !lostupdate

package memorystore

import "sync/atomic"

// swap is the compare-and-swap of a decision. (Built with the tag
// lostupdate it is a plain store instead, which loses concurrent updates:
// the concurrency test must then fail, and ./scripts/test checks that it
// does.)
func swap(state *atomic.Int64, old, next int64) bool { return state.CompareAndSwap(old, next) }
