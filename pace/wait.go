package pace

import (
	"context"
	"fmt"
	"time"
)

// WaitError is the error of a request that would have to wait longer than
// it may: longer than what is left of [Options.MaxWait], or past its
// context's deadline. The [Transport] returns it at once, instead of
// waiting. Test for it with errors.As; when the deadline forbade the wait,
// errors.Is(err, context.DeadlineExceeded) holds too.
type WaitError struct {
	// Wait is how long the request would have had to wait (for an answer
	// of unknown delay: how long it waited).
	Wait time.Duration
	// Max is how long it could still wait: what was left of MaxWait, or
	// the time until its context's deadline.
	Max time.Duration
	// Cause names what asked for the wait, such as `the Retry-After of a
	// 429 from example.com`.
	Cause string

	deadline bool // Max is the time until the context's deadline
	answer   bool // the request waited Wait for an answer that might have said more
}

// Error says how long the request would have waited, for what, and why it
// may not.
func (e *WaitError) Error() string {
	if e.answer {
		bound := "all it may wait (Options.MaxWait)"
		if e.deadline {
			bound = "up to its deadline"
		}
		return fmt.Sprintf("pace: the request waited %v, %s, for %s", e.Wait, bound, e.Cause)
	}
	if e.deadline {
		return fmt.Sprintf("pace: a wait of %v for %s would pass the request's deadline, in %v", e.Wait, e.Cause, e.Max)
	}
	return fmt.Sprintf("pace: a wait of %v for %s is longer than the %v the request may still wait (Options.MaxWait)", e.Wait, e.Cause, e.Max)
}

// Unwrap returns context.DeadlineExceeded when the request's deadline
// forbade the wait, else nil.
func (e *WaitError) Unwrap() error {
	if e.deadline {
		return context.DeadlineExceeded
	}
	return nil
}

// waiter holds one request back, through all its waits, for at most
// MaxWait in all and never past its context's deadline.
type waiter struct {
	ctx  context.Context
	left time.Duration // what is left of MaxWait
}

// check returns the WaitError, without its Cause, of a wait of d, or nil
// when the request may wait that long.
func (w *waiter) check(d time.Duration) *WaitError {
	if d <= 0 {
		return nil
	}
	if d > w.left {
		return &WaitError{Wait: d, Max: max(w.left, 0)}
	}
	if dl, ok := w.ctx.Deadline(); ok {
		if until := time.Until(dl); d >= until {
			return &WaitError{Wait: d, Max: max(until, 0), deadline: true}
		}
	}
	return nil
}

// bound returns the longest the request may still wait.
func (w *waiter) bound() (d time.Duration, deadline bool) {
	d = w.left
	if dl, ok := w.ctx.Deadline(); ok {
		if until := time.Until(dl); until <= d {
			return until, true
		}
	}
	return d, false
}

// wait waits d, or until wake is closed (nil: never), or the context ends,
// and counts the time against MaxWait. It reports whether wake was closed.
func (w *waiter) wait(d time.Duration, wake <-chan struct{}) (woken bool, err error) {
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wake:
		woken = true
	case <-w.ctx.Done():
		return false, w.ctx.Err()
	}
	w.left -= time.Since(start)
	return woken, nil
}

// waitAnswer waits until wake is closed, for as long as the request may
// wait; past that, it returns the WaitError, without its Cause.
func (w *waiter) waitAnswer(wake <-chan struct{}) (*WaitError, error) {
	d, deadline := w.bound()
	if d > 0 {
		woken, err := w.wait(d, wake)
		if woken || err != nil {
			return nil, err
		}
	}
	d = max(d, 0)
	return &WaitError{Wait: d, Max: d, deadline: deadline, answer: true}, nil
}
