package ratelimit

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// defaultMaxQueued is MiddlewareOptions.MaxQueued's default: the requests that may
// wait in shaping queues at once, across all keys of a Middleware. Each
// holds a goroutine and a connection (a file descriptor) while it waits;
// 256 is a quarter of the usual limit of 1024 open files and a few
// megabytes of memory, and leaves the rest of a small server to the
// requests that run.
const defaultMaxQueued = 256

// enqueue gives the allowed request of d, which must wait d.res.Delay
// (LeakyShape), a place in the shaping queues, or refuses it at once,
// what it took to go back: when its wait would not end before its
// response can no longer be written (waitDeadline), or when
// MiddlewareOptions.MaxQueued requests wait already. A place is counted
// in its limiter's occupancy (internal/occupancy) until dequeue.
func (m *Middleware) enqueue(r *http.Request, d *decision) {
	now := time.Now()
	if end, ok := waitDeadline(r, now); ok && !now.Add(d.res.Delay).Before(end) {
		m.refuseQueued(d)
		return
	}
	if m.cfg.maxQueued >= 0 && m.queued.Add(1) > m.cfg.maxQueued { // < 0: no bound
		m.queued.Add(-1)
		m.refuseQueued(d)
		return
	}
	d.queued = true
	d.lim.occ.Queued.Add(1)
}

// dequeue frees the place in the shaping queues that d holds, if any.
func (m *Middleware) dequeue(d *decision) {
	if d.queued {
		d.queued = false
		if m.cfg.maxQueued >= 0 {
			m.queued.Add(-1)
		}
		d.lim.occ.Queued.Add(-1)
	}
}

// refuseQueued turns the result of d into a refusal, what it took to go
// back (finish), by the shaping policies that would have queued it, with
// Retry-After the wait it would have had: its turn.
func (m *Middleware) refuseQueued(d *decision) {
	d.back = d.res
	res := d.res
	res.Allowed, res.Remaining, res.RetryAfter, res.Delay = false, 0, res.Delay, 0
	res.ResetAfter = max(res.ResetAfter, res.RetryAfter)
	if res.Results != nil {
		res.Results = slices.Clone(res.Results)
		for i := range res.Results {
			if r := &res.Results[i]; r.Delay > 0 {
				r.Allowed, r.RetryAfter, r.Delay = false, r.Delay, 0
			}
		}
	}
	d.res = res
}

// waitDeadline returns the moment, at now or later, after which r's
// response can no longer be written, and whether there is one: the
// earlier of its context's deadline and the write deadline of the
// http.Server that serves it (http.ServerContextKey), WriteTimeout from
// now. The server set its deadline a little before now, when it had read
// the request's header, so this one is at most that little late.
func waitDeadline(r *http.Request, now time.Time) (time.Time, bool) {
	ctx := r.Context()
	end, ok := ctx.Deadline()
	if srv, _ := ctx.Value(http.ServerContextKey).(*http.Server); srv != nil && srv.WriteTimeout > 0 {
		if w := now.Add(srv.WriteTimeout); !ok || w.Before(end) {
			end, ok = w, true
		}
	}
	return end, ok
}

// sleep waits for d or until ctx ends, and returns ctx's error in the latter
// case.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// wait holds the allowed request of d until its turn, then frees its
// place in the shaping queues. A request whose context ends first is
// answered with an error wrapping its context's error (context.Canceled), what it took to go
// back (finish).
func (m *Middleware) wait(w http.ResponseWriter, r *http.Request, d *decision) {
	err := sleep(r.Context(), d.res.Delay)
	m.dequeue(d)
	if err != nil {
		d.back = d.res
		m.cfg.OnError(w, r, fmt.Errorf("%w: %w", errWaitAbandoned, err))
	}
}
