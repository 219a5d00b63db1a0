package ratelimit

import (
	"net/http"
)

// For the tests of package ratelimit_test.
var ErrPanic = errPanic

// ErrWaitAbandoned is what an abandoned wait in a shaping queue wraps,
// beside its context's error.
var ErrWaitAbandoned = errWaitAbandoned

// DefaultErrorHandler answers as a Middleware's default error handler
// does, with log state of its own.
func DefaultErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	errorAnswers{storeLines: &logSpacing{every: storeLinesEvery}, refusals: new(refusals)}.answer(w, r, err)
}
