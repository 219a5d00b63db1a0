package ratelimit

import (
	"time"

	"github.com/tokenfair/ratelimit/internal/keyhash"
)

// Event describes one decision of a [Middleware], for MiddlewareOptions.Observe.
type Event struct {
	// Limiter is the limiter that decided (MiddlewareOptions.LimiterFor may pick
	// another than the Middleware's). Its Policies are the policies of the
	// decision, except for a request that MaxInFlight refused, whose
	// Result.Policy is the in-flight limit's, named "inflight".
	Limiter *Limiter
	// KeyHash is a 64-bit keyed hash of the request's key, to tell
	// clients apart in logs without recording the key; 0 when the request
	// had no key. Its seed is secret and made once per process: a key has
	// the same hash in every Middleware of a process (and in redisstore's
	// ErrKeyState errors), another one in the next process, and a reader
	// of the logs cannot compute it for a guessed key.
	KeyHash uint64
	// Result is the decision; the zero Result when Err is set.
	Result Result
	// Err is why no decision could be taken (wrapping ErrMissingKey,
	// ErrBadRequest, ErrStore, ...), or nil.
	Err error
	// Elapsed is the time the decision took, store round trip included,
	// shaping delay excluded.
	Elapsed time.Duration
}

// keyHash returns Event.KeyHash of key: its keyed hash, or 0 for no key.
func keyHash(key string) uint64 { return keyhash.Sum(key) }
