package ratelimit

import "errors"

// The errors a caller can act on. Every error of this module wraps at most
// one of them, with a message naming the cause and the value at fault;
// test with errors.Is. docs/http.md lists the default answer to each.
var (
	// ErrMissingKey: the request carries no identity (no API key, no user
	// ID), or its key is empty. 401 by default.
	ErrMissingKey = errors.New("ratelimit: missing key")
	// ErrBadRequest: the request cannot be limited as it is (no usable
	// client address, two API key lines, a bad or too large cost). 400 by
	// default.
	ErrBadRequest = errors.New("ratelimit: bad request")
	// ErrStore: the store could not decide, or a failover failing closed
	// refuses. 503 by default.
	ErrStore = errors.New("ratelimit: store failed")
	// ErrWaitAbandoned: the client left while its request waited in a
	// LeakyShape queue. 503 by default, not logged.
	ErrWaitAbandoned = errors.New("ratelimit: request left the queue before its turn")
)

// errPanic wraps the value of a panic in a key, cost, Skip or LimiterFor
// function; the default error handler answers 500.
var errPanic = errors.New("ratelimit: panic while deciding")

// errCostExceedsBurst marks a cost that no wait can ever allow, so that
// the default error handler can say so.
var errCostExceedsBurst = errors.New("cost exceeds burst")
