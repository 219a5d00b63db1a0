package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// A dialWatch makes the calls of one Store through a *redis.Client fail at
// once, with the cause, when the client's dial says that Redis is not
// there (the connection is refused, the host name does not exist).
//
// go-redis dials on a goroutine of its own, retrying a failed dial
// (Options.DialerRetries, 5 by default, 100 ms apart), and the command that
// waits for the connection sees none of it: it waits until its context
// ends and reports only "context deadline exceeded", however fast the
// dial failed. A dialWatch is a hook on the client that sees every dial
// attempt: when one fails with a definitive answer (see definitive), it
// ends the context of every call of the store in flight, and the call
// reports the dial's error. Any other failure (a local shortage of file
// descriptors or ports, a timeout) is left to go-redis, which retries the
// dial or hands the call a connection freed meanwhile, exactly as it does
// without the hook. It does so only on a *redis.Client, whose calls all go
// to one server (the master, for a failover client), so that a refused
// dial there says that every call in flight will fail; a
// *redis.ClusterClient or a *redis.Ring dials many servers.
//
// Calls register in one of a few shards, chosen at random, each a list
// linked through the calls' own watchers (no allocation, and a lock that
// concurrent calls seldom share); a failed dial walks them all.
//
// A nil *dialWatch watches nothing.
type dialWatch struct {
	shards [watchShards]watchShard
	queue  *batcher // its queued calls fail too; nil: none
}

const watchShards = 8

type watchShard struct {
	mu   sync.Mutex
	head *watcher // the calls in flight, linked through next and prev
	_    [48]byte // one cache line each
}

// A watcher is one call in flight, as a dialWatch sees it. Its zero value
// is ready to use, and one that watch never registered reports every error
// as it is.
type watcher struct {
	ctx        context.Context    // the call's
	cancel     context.CancelFunc // ends ctx
	shard      *watchShard        // where it is registered; nil: nowhere
	prev, next *watcher
	err        error // the dial's error, set (under shard.mu) when it ended ctx
}

var _ redis.Hook = (*dialWatch)(nil)

// watchDials returns a dialWatch hooked on client if it is a *redis.Client,
// and nil otherwise.
func watchDials(client redis.Scripter) *dialWatch {
	c, ok := client.(*redis.Client)
	if !ok {
		return nil
	}
	d := new(dialWatch)
	c.AddHook(d)
	return d
}

// watch registers w, a call with the context ctx that cancel ends, so that
// a definitive failed dial ends it; the call must call d.done(w) when it is
// over, before it reads w.cause.
func (d *dialWatch) watch(w *watcher, ctx context.Context, cancel context.CancelFunc) {
	if d == nil {
		return
	}
	w.ctx, w.cancel = ctx, cancel
	sh := &d.shards[rand.Uint32()%watchShards]
	sh.mu.Lock()
	w.shard, w.next = sh, sh.head
	if sh.head != nil {
		sh.head.prev = w
	}
	sh.head = w
	sh.mu.Unlock()
}

// done unregisters w, registered by watch, if it was.
func (d *dialWatch) done(w *watcher) {
	sh := w.shard
	if sh == nil {
		return
	}
	sh.mu.Lock()
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		sh.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	}
	w.prev, w.next, w.shard = nil, nil, nil
	sh.mu.Unlock()
}

// cause returns err, the error of the call of w, or the dial's error if a
// failed dial ended the call: go-redis then reports only the context's end
// (context canceled), and the cause, such as "connect: connection refused",
// would be lost. w must be done.
func (w *watcher) cause(err error) error {
	if w.err != nil && errors.Is(err, context.Canceled) {
		return w.err
	}
	return err
}

// DialHook implements [redis.Hook]: a dial attempt that fails with a
// definitive answer, other than one abandoned by go-redis (its context
// ended), ends the calls in flight.
func (d *dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil && ctx.Err() == nil && definitive(network, err) {
			d.fail(err)
		}
		return conn, err
	}
}

// fail ends every call in flight with err as its cause, the queued ones
// first (see batcher.fail).
func (d *dialWatch) fail(err error) {
	if d.queue != nil {
		d.queue.fail(err)
	}
	for i := range d.shards {
		sh := &d.shards[i]
		sh.mu.Lock()
		for w := sh.head; w != nil; w = w.next {
			if w.err == nil && w.ctx.Err() == nil {
				w.err = err
				w.cancel()
			}
		}
		sh.mu.Unlock()
	}
}

// definitive reports whether err, the error of a dial on network, says
// that the server is not there, so that every call waiting for a
// connection to it would fail, and the next dial too: the server's host
// (or a firewall on the way) refused the connection, nothing listens on
// the port (ECONNREFUSED, which go-redis's retries, 100 ms apart, would
// only meet again); the name does not exist (a *net.DNSError that
// IsNotFound: the resolver answered NXDOMAIN, not a timeout or a
// temporary failure); or, for a Unix socket, there is no socket at the
// path (ENOENT). Anything else, and above all an error of the local host
// (EMFILE, ENFILE, EADDRNOTAVAIL, ENOBUFS), a timeout, an unreachable
// network or host, may pass: go-redis retries the dial, or gives the
// waiting call a connection another call frees, and the call succeeds.
func definitive(network string, err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.IsNotFound && !dnsErr.IsTimeout && !dnsErr.IsTemporary
	}
	return strings.HasPrefix(network, "unix") && errors.Is(err, syscall.ENOENT)
}

// ProcessHook implements [redis.Hook]; it changes nothing.
func (d *dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook implements [redis.Hook]; it changes nothing.
func (d *dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
