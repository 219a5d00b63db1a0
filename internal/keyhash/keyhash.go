// Package keyhash is the hash by which logs, errors and observers name a
// rate-limit key without recording it: ratelimit.Event.KeyHash, and the
// key hash in redisstore's ErrKeyState errors.
package keyhash

import "hash/maphash"

// seed is made once per process, at start, and never changes: a hash is
// stable within a process and differs from one process to the next, so
// that a reader of logs cannot compute the hash of a guessed key (an IP
// address of a small range) to find which it is.
var seed = maphash.MakeSeed()

// Sum returns the keyed 64-bit hash of key, or 0 for no key (a key whose
// hash would be 0 gets 1).
func Sum(key string) uint64 {
	if key == "" {
		return 0
	}
	return max(maphash.String(seed, key), 1)
}
