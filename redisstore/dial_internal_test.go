package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestDefinitive: only the answers that say the server is not there end
// the calls in flight.
func TestDefinitive(t *testing.T) {
	op := func(err error) error { return &net.OpError{Op: "dial", Net: "tcp", Err: err} }
	for _, tc := range []struct {
		network string
		err     error
		want    bool
	}{
		{"tcp", op(os.NewSyscallError("connect", syscall.ECONNREFUSED)), true},
		{"tcp", fmt.Errorf("wrapped: %w", op(os.NewSyscallError("connect", syscall.ECONNREFUSED))), true},
		{"tcp", op(&net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}), true},
		{"unix", op(os.NewSyscallError("connect", syscall.ENOENT)), true},

		{"tcp", op(&net.DNSError{Err: "i/o timeout", Name: "x", IsTimeout: true}), false},
		{"tcp", op(&net.DNSError{Err: "server misbehaving", Name: "x", IsTemporary: true}), false},
		{"tcp", op(os.NewSyscallError("socket", syscall.EMFILE)), false},
		{"tcp", op(os.NewSyscallError("socket", syscall.ENFILE)), false},
		{"tcp", op(os.NewSyscallError("connect", syscall.EADDRNOTAVAIL)), false},
		{"tcp", op(os.NewSyscallError("connect", syscall.ENOBUFS)), false},
		{"tcp", op(os.NewSyscallError("connect", syscall.ENETUNREACH)), false},
		{"tcp", op(os.NewSyscallError("connect", syscall.EHOSTUNREACH)), false},
		{"tcp", op(os.NewSyscallError("connect", syscall.ENOENT)), false},
		{"tcp", op(os.ErrDeadlineExceeded), false},
		{"tcp", context.DeadlineExceeded, false},
		{"tcp", errors.New("synthetic"), false},
	} {
		assert.Equal(t, tc.want, definitive(tc.network, tc.err), "%s %v", tc.network, tc.err)
	}
}

// TestWatcherList: calls register and leave in any order; a failure ends
// those in flight, once, and none that has left.
func TestWatcherList(t *testing.T) {
	d := new(dialWatch)
	ws := make([]watcher, 20)
	cancels := make([]context.CancelFunc, len(ws))
	for i := range ws {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		d.watch(&ws[i], ctx, cancel)
	}
	for i := 0; i < len(ws); i += 2 {
		d.done(&ws[i])
		d.done(&ws[i]) // twice is harmless
	}
	refused := errors.New("refused")
	d.fail(refused)
	d.fail(errors.New("later"))
	for i := range ws {
		d.done(&ws[i])
		if i%2 == 0 {
			assert.NoError(t, ws[i].ctx.Err(), "%d left before the failure", i)
			assert.Equal(t, context.Canceled, ws[i].cause(context.Canceled))
		} else {
			assert.ErrorIs(t, ws[i].ctx.Err(), context.Canceled, "%d", i)
			assert.Equal(t, refused, ws[i].cause(context.Canceled), "%d: the first failure", i)
			assert.Equal(t, context.DeadlineExceeded, ws[i].cause(context.DeadlineExceeded))
		}
		cancels[i]()
	}
	for i := range d.shards {
		assert.Nil(t, d.shards[i].head)
	}
	var nilWatch *dialWatch
	var w watcher
	nilWatch.watch(&w, context.Background(), func() {})
	nilWatch.done(&w)
	assert.Equal(t, context.Canceled, w.cause(context.Canceled))
}
