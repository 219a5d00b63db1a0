package ratelimit

import (
	"errors"
	"net/http"
)

// KeyFunc returns the key that identifies the client of a request: requests
// with the same key share a bucket. It returns ErrMissingKey when the request
// carries no identity. An empty key with a nil error is refused by the
// middleware (ErrEmptyKey), never turned into one bucket shared by everybody.
type KeyFunc func(r *http.Request) (string, error)

// Errors returned by the key functions of this package.
var (
	ErrMissingKey = errors.New("ratelimit: request carries no key")
	ErrNoClientIP = errors.New("ratelimit: no valid client IP")
)

// STUB: replaced by the keyfunc helper.
