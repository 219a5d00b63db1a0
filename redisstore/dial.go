package redisstore

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/redis/go-redis/v9"
)

// A dialWatch makes the calls through a *redis.Client fail at once, with
// the cause, when the client cannot connect to Redis (the connection is
// refused, the name does not resolve).
//
// go-redis dials on a goroutine of its own, retrying a failed dial
// (Options.DialerRetries, 5 by default, 100 ms apart), and the command that
// waits for the connection sees none of it: it waits until its context
// ends and reports only "context deadline exceeded", however fast the
// dial failed. A dialWatch is a hook on the client that sees every dial:
// when one fails, it ends the context of every call of the store in flight
// with the dial's error as its cause. It does so only on a *redis.Client,
// whose calls all go to one server (the master, for a failover client), so
// that a failed dial there says that every call in flight will fail; a
// *redis.ClusterClient or a *redis.Ring dials many servers.
//
// A nil *dialWatch watches nothing.
type dialWatch struct {
	mu    sync.Mutex
	calls map[*context.CancelCauseFunc]struct{} // in flight
}

var _ redis.Hook = (*dialWatch)(nil)

// watchDials returns a dialWatch hooked on client if it is a *redis.Client,
// and nil otherwise.
func watchDials(client redis.Scripter) *dialWatch {
	c, ok := client.(*redis.Client)
	if !ok {
		return nil
	}
	w := &dialWatch{calls: make(map[*context.CancelCauseFunc]struct{})}
	c.AddHook(w)
	return w
}

// watch returns ctx, which the first failed dial ends with its error as
// the cause, and the function that the call must call when it is over.
func (w *dialWatch) watch(ctx context.Context) (context.Context, func()) {
	if w == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	w.mu.Lock()
	w.calls[&cancel] = struct{}{}
	w.mu.Unlock()
	return ctx, func() {
		w.mu.Lock()
		delete(w.calls, &cancel)
		w.mu.Unlock()
		cancel(nil)
	}
}

// DialHook implements [redis.Hook]: a dial that fails, other than one
// abandoned by go-redis (its context ended), ends the calls in flight.
func (w *dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil && ctx.Err() == nil {
			w.mu.Lock()
			for cancel := range w.calls {
				(*cancel)(&dialError{err})
			}
			w.mu.Unlock()
		}
		return conn, err
	}
}

// ProcessHook implements [redis.Hook]; it changes nothing.
func (w *dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook implements [redis.Hook]; it changes nothing.
func (w *dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A dialError is a failed dial that ended a call's context.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// cause returns err, the error of a call with the context ctx, or the
// reason the call failed if a failed dial ended ctx: go-redis then reports
// only the context's end (context canceled), and the cause, such as
// "connect: connection refused", would be lost.
func cause(ctx context.Context, err error) error {
	var de *dialError
	if errors.Is(err, context.Canceled) && errors.As(context.Cause(ctx), &de) {
		return de.err
	}
	return err
}
