// Package storeerr holds the store errors that ratelimit does not export:
// those its stores return and its failover recognises.
package storeerr

import (
	"fmt"

	"github.com/tokenfair/ratelimit"
)

// ErrKeyState: the store answered, but the state of one key is unusable
// (in Redis, a key of another type or a value that is no rate-limit
// state), so that key's requests cannot be decided while other keys can.
// It wraps ratelimit.ErrStore; a failover store does not count it as a
// failure of its store.
var ErrKeyState = fmt.Errorf("%w: a key's state is unusable", ratelimit.ErrStore)
