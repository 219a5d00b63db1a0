package redisstore

import (
	"context"
	"fmt"
	"time"
)

// within runs f, a call to Redis, under the store's deadline, and returns
// f's error as failure does.
func (s *Store) within(parent context.Context, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(parent, s.timeout)
	defer cancel()
	var w watcher
	s.dials.watch(&w, ctx, cancel)
	defer s.dials.done(&w)
	err := f(ctx)
	s.dials.done(&w) // before reading w.cause
	if err != nil {
		s.reload(err)
		return s.failure(parent, ctx, &w, err)
	}
	return nil
}

// failure returns err, the error of a call made under ctx, the store's
// deadline over parent: naming the deadline when it was what ended the
// call, or the dial's error when a refused dial ended it (see dialWatch).
// The deadline has passed by the clock, not by ctx.Err: a socket's read
// deadline, set from it, may fire before ctx's own timer.
func (s *Store) failure(parent, ctx context.Context, w *watcher, err error) error {
	d, _ := ctx.Deadline()
	if pd, ok := parent.Deadline(); (!ok || pd.After(d)) && parent.Err() == nil && !time.Now().Before(d) {
		return s.timedOut(err)
	}
	return w.cause(err)
}

// timedOut returns err, the error of a call that its deadline ended,
// naming the deadline.
func (s *Store) timedOut(err error) error {
	return fmt.Errorf("no answer within Options.Timeout %v: %w", s.timeout, err)
}
