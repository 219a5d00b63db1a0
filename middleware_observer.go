package ratelimit

import (
	"time"

	"github.com/tokenfair/ratelimit/internal/keyhash"
	"github.com/tokenfair/ratelimit/internal/occupancy"
)

// Event describes one decision of a [Middleware], for
// MiddlewareOptions.Observe.
type Event struct {
	// Limiter is the limiter that decided (LimiterFor's pick, if any).
	Limiter *Limiter
	// KeyHash is a keyed hash of the request's key, 0 for none, to tell
	// clients apart in logs; its secret seed is made once per process.
	KeyHash uint64
	// Result is the decision (the "inflight" policy's for a MaxInFlight
	// refusal); the zero Result when Err is set.
	Result Result
	// Err is why no decision could be taken, or nil.
	Err error
	// Elapsed is the time deciding took, store included, shaping excluded.
	Elapsed time.Duration
}

// keyHash returns Event.KeyHash of key: its keyed hash, or 0 for no key.
func keyHash(key string) uint64 { return keyhash.Sum(key) }

// The observers of this repository read a Limiter's occupancy, the requests
// that wait in its shaping queues and hold in-flight slots, through
// occupancy.Of.
func init() {
	occupancy.Of = func(l any) *occupancy.Counts {
		if l, ok := l.(*Limiter); ok && l != nil {
			return &l.occ
		}
		return nil
	}
}
