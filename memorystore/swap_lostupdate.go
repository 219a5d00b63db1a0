//go:build lostupdate

package memorystore

import "sync/atomic"

// swap, built with the tag lostupdate, is the mutation that the
// concurrency test must catch: the read-modify-write of a decision without
// its compare-and-swap, so that two decisions that read the same state both
// win and one update is lost.
func swap(state *atomic.Int64, _, next int64) bool {
	state.Store(next)
	return true
}
