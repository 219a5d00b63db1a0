package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// replyError returns the error that go-redis returns for a Redis error
// reply of text, as a real server sends it.
func replyError(t *testing.T, c *redis.Client, text string) error {
	t.Helper()
	err := c.Eval(context.Background(), "return redis.error_reply(ARGV[1])", nil, text).Err()
	require.Error(t, err)
	return err
}

// TestStale: the errors of a Cluster node that say its slot map may be
// out of date are those of a node that does not answer, and the answers
// of a node that does not serve the slot (now); a caller's cancellation
// and every other answer are not.
func TestStale(t *testing.T) {
	c := redistest.Start(t).Client()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{fmt.Errorf("redisstore: %w", refused), true},
		{context.DeadlineExceeded, true},
		{io.EOF, true},
		{io.ErrUnexpectedEOF, true},
		{replyError(t, c, "MOVED 3999 127.0.0.1:6381"), true},
		{replyError(t, c, "ASK 3999 127.0.0.1:6381"), true},
		{replyError(t, c, "CLUSTERDOWN The cluster is down"), true},
		{replyError(t, c, "TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{replyError(t, c, "READONLY You can't write against a read only replica."), true},
		{context.Canceled, false},
		{replyError(t, c, "NOSCRIPT No matching script."), false},
		{replyError(t, c, "WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{errors.New("redisstore: malformed reply"), false},
	} {
		assert.Equal(t, tt.want, stale(tt.err), "stale(%v)", tt.err)
	}
}

// TestReloadBounded: a Store over a ClusterClient asks it for the slot map
// again when a call fails as a stale map makes it fail, once per
// reloadEvery however many fail, and never for a call that succeeds or an
// answer that says nothing of the map. The "cluster" is one server that
// ClusterOptions.ClusterSlots names for every slot, and counts the loads.
func TestReloadBounded(t *testing.T) {
	srv := redistest.Start(t)
	var loads atomic.Int64
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		ContextTimeoutEnabled: true,
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			loads.Add(1)
			return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: srv.Addr}}}}, nil
		},
	})
	t.Cleanup(func() { cc.Close() })
	s, err := New(cc, &Options{Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	p := &ratelimit.Policy{Name: "p", Limit: ratelimit.PerSecond(1000)}
	ctx := context.Background()

	for range 100 {
		_, err := s.Take(ctx, p, "k", 1)
		require.NoError(t, err)
	}
	require.Equal(t, int64(1), loads.Load(), "slot maps loaded by 100 decisions: the first")

	s.reload(replyError(t, srv.Client(), "NOSCRIPT No matching script."))
	s.reload(context.Canceled)
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, int64(1), loads.Load(), "slot maps loaded after errors that say nothing of the map")

	// Failing calls, 1000 in a second: the store asks for the map once per
	// reloadEvery at most (each time it asks, it notes when).
	asked := map[int64]bool{}
	start := time.Now()
	for i := range 1000 {
		s.reload(context.DeadlineExceeded)
		asked[s.nodes.reloaded.Load()] = true
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Millisecond)))
	}
	took := time.Since(start)
	assert.LessOrEqual(t, len(asked), int(took/reloadEvery)+1, "slot maps asked for by 1000 failed calls in %v", took)
	assert.GreaterOrEqual(t, len(asked), int(took/reloadEvery)-1, "slot maps asked for by 1000 failed calls in %v", took)
	assert.Eventually(t, func() bool { return loads.Load() > 1 }, time.Second, 5*time.Millisecond, "slot maps loaded after failed calls")

	// A call that fails for real asks for the map at once.
	time.Sleep(reloadEvery)
	before := loads.Load()
	srv.Kill()
	_, err = s.Take(ctx, p, "k", 1)
	require.Error(t, err)
	assert.Eventually(t, func() bool { return loads.Load() > before }, time.Second, 5*time.Millisecond, "a slot map loaded after a failed decision")
}
