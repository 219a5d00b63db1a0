package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/failover"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// The store's deadline in the tests of failed dials: long, so that a call
// that waits for it cannot pass for one that failed at once.
const (
	dialDeadline = 10 * time.Second
	fast         = time.Second // a failed dial answers within this (at once, but the machine may be loaded)
)

// refusedAddr returns a loopback address where nothing listens: a free
// port, closed again.
func refusedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// defaultClient returns a client of addr with go-redis's defaults (dial
// retries, command retries) but for ContextTimeoutEnabled, which New
// requires.
func defaultClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRefusedFailsFast: with nothing listening on Redis's port, a call
// fails at once, not at its deadline, with the cause, again and again.
func TestRefusedFailsFast(t *testing.T) {
	for _, batching := range []bool{false, true} {
		s := newStore(t, defaultClient(t, refusedAddr(t)), &redisstore.Options{Timeout: dialDeadline, NoBatching: !batching})
		for i := range 3 {
			start := time.Now()
			_, err := s.Take(context.Background(), policy, "k", 1)
			elapsed := time.Since(start)
			assert.Less(t, elapsed, fast, "batching %v, call %d: Take took %v", batching, i, elapsed)
			assert.ErrorIs(t, err, syscall.ECONNREFUSED)
			assert.ErrorContains(t, err, "connection refused")
			assert.ErrorContains(t, err, "redisstore: dial tcp ")
			assert.NotErrorIs(t, err, context.Canceled, "the store's own cancellation is not the caller's")
		}
	}
}

// TestRefusedFailsFastConcurrently: every call in flight when a dial
// fails ends at once, those queued for a batch too.
func TestRefusedFailsFastConcurrently(t *testing.T) {
	for _, batching := range []bool{false, true} {
		s := newStore(t, defaultClient(t, refusedAddr(t)), &redisstore.Options{Timeout: dialDeadline, NoBatching: !batching})
		var wg sync.WaitGroup
		errs := make([]error, 16)
		start := time.Now()
		for i := range errs {
			wg.Go(func() { _, errs[i] = s.Take(context.Background(), policy, "k", 1) })
		}
		wg.Wait()
		elapsed := time.Since(start)
		assert.Less(t, elapsed, 2*fast, "batching %v: 16 calls took %v", batching, elapsed)
		for _, err := range errs {
			assert.ErrorIs(t, err, syscall.ECONNREFUSED)
		}
	}
}

// TestRefusedThroughLimiter: the Limiter's error is ErrStore, and still
// the cause.
func TestRefusedThroughLimiter(t *testing.T) {
	s := newStore(t, defaultClient(t, refusedAddr(t)), &redisstore.Options{Timeout: dialDeadline})
	lim, err := ratelimit.New(s, ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	require.NoError(t, err)
	start := time.Now()
	_, err = lim.Take(context.Background(), "k", 1)
	assert.Less(t, time.Since(start), fast)
	assert.ErrorIs(t, err, ratelimit.ErrStore)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.ErrorContains(t, err, "connection refused")
}

// TestRefusedThroughFailover: the failover's OnError and the error of a
// closed failover carry the cause, at once.
func TestRefusedThroughFailover(t *testing.T) {
	s := newStore(t, defaultClient(t, refusedAddr(t)), &redisstore.Options{Timeout: dialDeadline})
	var mu sync.Mutex
	var seen []error
	fo, err := failover.New(s, &failover.Options{Mode: failover.Closed, Logger: slog.New(slog.DiscardHandler),
		OnError: func(err error) { mu.Lock(); seen = append(seen, err); mu.Unlock() }})
	require.NoError(t, err)
	lim, err := ratelimit.New(fo, ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	require.NoError(t, err)
	start := time.Now()
	_, err = lim.Take(context.Background(), "k", 1)
	assert.Less(t, time.Since(start), fast)
	assert.ErrorIs(t, err, ratelimit.ErrStore)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	mu.Lock()
	defer mu.Unlock()
	if assert.Len(t, seen, 1) {
		assert.ErrorIs(t, seen[0], syscall.ECONNREFUSED)
		assert.ErrorContains(t, seen[0], "connection refused")
	}
}

// TestUnresolvableFailsFast: a host name that does not resolve is
// reported as such (the resolver's error), not as the deadline.
func TestUnresolvableFailsFast(t *testing.T) {
	s := newStore(t, defaultClient(t, "no-such-host.invalid:6379"), &redisstore.Options{Timeout: dialDeadline})
	_, err := s.Take(context.Background(), policy, "k", 1)
	var dnsErr *net.DNSError
	assert.ErrorAs(t, err, &dnsErr)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
}

// TestWrongPasswordFailsFast: Redis's refusal of the password is the
// error, at once.
func TestWrongPasswordFailsFast(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "secret")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "wrong", ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	s := newStore(t, c, &redisstore.Options{Timeout: dialDeadline})
	start := time.Now()
	_, err := s.Take(context.Background(), policy, "k", 1)
	assert.Less(t, time.Since(start), fast)
	assert.ErrorContains(t, err, "WRONGPASS")
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
}

// TestRefusedAcquireFailsFast: the slot store's calls fail at once too.
func TestRefusedAcquireFailsFast(t *testing.T) {
	s := newStore(t, defaultClient(t, refusedAddr(t)), &redisstore.Options{Timeout: dialDeadline})
	start := time.Now()
	_, err := s.Acquire(context.Background(), "k", "t", 1, time.Second)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	err = s.Release(context.Background(), "k", "token")
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.Less(t, time.Since(start), 2*fast)
}

// TestPausedNewConnectionCostsOneDeadline: a hung Redis (SIGSTOP) still
// accepts connections (the kernel does), and a call that dials one waits
// for its deadline, no more.
func TestPausedNewConnectionCostsOneDeadline(t *testing.T) {
	srv := redistest.Start(t)
	const deadline = 200 * time.Millisecond
	s := newStore(t, defaultClient(t, srv.Addr), &redisstore.Options{Timeout: deadline})
	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	_, err := s.Take(context.Background(), policy, "k", 1)
	elapsed := time.Since(start)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.GreaterOrEqual(t, elapsed, deadline)
	assert.Less(t, elapsed, deadline+slack)
}

// TestRefusedThenRestarted: once Redis listens again, calls succeed.
func TestRefusedThenRestarted(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, defaultClient(t, srv.Addr), &redisstore.Options{Timeout: dialDeadline})
	srv.Kill()
	_, err := s.Take(context.Background(), policy, "k", 1)
	require.Error(t, err)
	srv.Restart()
	_, err = s.Take(context.Background(), policy, "k", 1)
	assert.NoError(t, err)
}

// TestLocalDialFailurePasses: a dial attempt that fails for a reason of
// the local host (EMFILE: out of file descriptors) or for no definitive
// reason ends no call: go-redis retries the dial, and the calls in flight
// succeed, as they do through go-redis alone.
func TestLocalDialFailurePasses(t *testing.T) {
	for name, dialErr := range map[string]error{
		"EMFILE":    &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)},
		"synthetic": errors.New("a dial failure that says nothing of the server"),
		"timeout":   &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded},
	} {
		for _, batching := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/batching=%v", name, batching), func(t *testing.T) {
				srv := redistest.Start(t)
				// The first dial waits until a second has begun, or 200 ms
				// (batched, the second call queues behind the first instead
				// of dialing), so that both calls are in flight, then fails.
				var dials atomic.Int32
				second := make(chan struct{})
				var d net.Dialer
				c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 4,
					Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
						switch dials.Add(1) {
						case 1:
							select {
							case <-second:
							case <-time.After(200 * time.Millisecond):
							}
							return nil, dialErr
						case 2:
							close(second)
						}
						return d.DialContext(ctx, network, addr)
					}})
				t.Cleanup(func() { c.Close() })
				s := newStore(t, c, &redisstore.Options{Timeout: dialDeadline, NoBatching: !batching})
				var wg sync.WaitGroup
				errs := make([]error, 2)
				for i := range errs {
					wg.Go(func() { _, errs[i] = s.Take(context.Background(), policy, "k"+strconv.Itoa(i), 1) })
				}
				wg.Wait()
				for i, err := range errs {
					assert.NoError(t, err, "call %d", i)
				}
				assert.GreaterOrEqual(t, dials.Load(), int32(2), "go-redis dialed again after the failure")
			})
		}
	}
}

// TestManyStoresOneClientFailFast: each of several stores made on one
// client (each with a hook of its own) fails fast, concurrently too.
func TestManyStoresOneClientFailFast(t *testing.T) {
	c := defaultClient(t, refusedAddr(t))
	stores := make([]*redisstore.Store, 5)
	for i := range stores {
		stores[i] = newStore(t, c, &redisstore.Options{Timeout: dialDeadline, NoBatching: i%2 == 0})
	}
	for i, s := range stores {
		start := time.Now()
		_, err := s.Take(context.Background(), policy, "k", 1)
		assert.Less(t, time.Since(start), fast, "store %d", i)
		assert.ErrorIs(t, err, syscall.ECONNREFUSED, "store %d", i)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4*len(stores))
	start := time.Now()
	for i := range errs {
		wg.Go(func() { _, errs[i] = stores[i%len(stores)].Take(context.Background(), policy, "k", 1) })
	}
	wg.Wait()
	assert.Less(t, time.Since(start), 2*fast)
	for _, err := range errs {
		assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	}
}
