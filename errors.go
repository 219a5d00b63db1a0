package ratelimit

import (
	"errors"
	"fmt"

	"github.com/tokenfair/ratelimit/internal/clientkey"
)

// The errors a caller can act on. Each error that this module returns
// wraps at most one of them (ErrKeyState is itself an ErrStore), with a
// message that names the cause and the value at fault; test with
// errors.Is.
var (
	// ErrMissingKey: the request carries no identity for its key (no API
	// key, no user ID), or the key function returned an empty key.
	// DefaultErrorHandler answers 401.
	ErrMissingKey = clientkey.ErrMissingKey
	// ErrBadRequest: the request cannot be limited as it is: no usable
	// client address, two lines of an API key field, a cost that the cost
	// function could not compute, or
	// a cost that is negative or above a policy's burst. DefaultErrorHandler
	// answers 400.
	ErrBadRequest = clientkey.ErrBadRequest
	// ErrStore: the store could not decide, or a failover that fails closed
	// refuses while it cannot. DefaultErrorHandler answers 503.
	ErrStore = errors.New("ratelimit: store failed")
	// ErrKeyState: the store answered, but the state of one key is
	// unusable (in Redis, a key of another type or a value that is no
	// rate-limit state, such as another application sharing the prefix
	// wrote), so that key's requests cannot be decided while other keys
	// can. It wraps ErrStore, so DefaultErrorHandler answers 503; a
	// failover store does not count it as a failure of its store.
	ErrKeyState = fmt.Errorf("%w: a key's state is unusable", ErrStore)
	// ErrNotAtomic is returned by [BatchStore.TakeAll] when it cannot
	// decide its requests in one atomic step.
	ErrNotAtomic = errors.New("ratelimit: requests cannot be decided atomically")
	// ErrWaitAbandoned: the request's context ended while it waited for its
	// turn in a LeakyShape queue (the client left). DefaultErrorHandler
	// answers 503 and does not log it.
	ErrWaitAbandoned = errors.New("ratelimit: request left the queue before its turn")
	// ErrPanic wraps the value of a panic in a key, cost, Skip or
	// LimiterFor function. DefaultErrorHandler answers 500.
	ErrPanic = errors.New("ratelimit: panic while deciding")
)

// errCostExceedsBurst marks a cost that no wait can ever allow, so that
// DefaultErrorHandler can say so.
var errCostExceedsBurst = errors.New("cost exceeds burst")
