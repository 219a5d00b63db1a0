package ratelimit

import "errors"

// The errors a caller can act on. Each error that this module returns
// wraps at most one of them, with a message that names the cause and the
// value at fault; test with errors.Is. The default error handler's answer
// to each is in docs/http.md.
var (
	// ErrMissingKey: the request carries no identity for its key (no API
	// key, no user ID), or the key function returned an empty key. 401 by
	// default.
	ErrMissingKey = errors.New("ratelimit: missing key")
	// ErrBadRequest: the request cannot be limited as it is: no usable
	// client address, two lines of an API key field, a cost that the cost
	// function could not compute, or a cost that is negative or above a
	// policy's burst. 400 by default.
	ErrBadRequest = errors.New("ratelimit: bad request")
	// ErrStore: the store could not decide (one key's unusable state
	// included), or a failover that fails closed refuses while it cannot.
	// 503 by default.
	ErrStore = errors.New("ratelimit: store failed")
	// ErrWaitAbandoned: the request's context ended while it waited for its
	// turn in a LeakyShape queue (the client left). 503 by default, not
	// logged.
	ErrWaitAbandoned = errors.New("ratelimit: request left the queue before its turn")
)

// errPanic wraps the value of a panic in a key, cost, Skip or LimiterFor
// function; the default error handler answers 500.
var errPanic = errors.New("ratelimit: panic while deciding")

// errCostExceedsBurst marks a cost that no wait can ever allow, so that
// the default error handler can say so.
var errCostExceedsBurst = errors.New("cost exceeds burst")
