//go:build !wholerefund

package memorystore

// owed returns until, the Until of a take being given back. (Built with the
// tag wholerefund it is a time far ahead instead, so that a give-back
// credits its whole cost whenever it comes: the give-back model test must
// then fail, and ./scripts/test checks that it does.)
func owed(until int64) int64 { return until }
