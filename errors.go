package ratelimit

import "errors"

// The errors a caller can act on, with the status of their default answer
// (docs/http.md). Every error of this module wraps at most one, with a
// message naming the cause and the value at fault; test with errors.Is.
var (
	// ErrMissingKey: no identity (API key, user ID), or an empty key. 401.
	ErrMissingKey = errors.New("ratelimit: missing key")
	// ErrBadRequest: the request cannot be limited as it is: no usable
	// client address, two API key lines, a bad or too large cost. 400.
	ErrBadRequest = errors.New("ratelimit: bad request")
	// ErrStore: the store could not decide, or a Closed failover refuses. 503.
	ErrStore = errors.New("ratelimit: store failed")
)

// errWaitAbandoned wraps, with the request's context's error
// (context.Canceled: test for that), a request that left while it waited
// in a LeakyShape queue. 503 by default, not logged.
var errWaitAbandoned = errors.New("ratelimit: request left the queue before its turn")

// errPanic wraps the value of a panic in a key, cost, Skip or LimiterFor
// function; the default error handler answers 500.
var errPanic = errors.New("ratelimit: panic while deciding")

// errCostExceedsBurst marks a cost that no wait can ever allow, so that
// the default error handler can say so.
var errCostExceedsBurst = errors.New("cost exceeds burst")
