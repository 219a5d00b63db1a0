package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// TestPausedServerCostsOneDeadline: a hung Redis (SIGSTOP) costs a call its
// deadline, not the client's read timeout, and the error names the
// deadline; a caller's own shorter deadline is not named as the store's.
func TestPausedServerCostsOneDeadline(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.Client(), &redisstore.Options{Timeout: 50 * time.Millisecond})
	ctx := context.Background()
	_, err := s.Take(ctx, policy, "k", 1)
	require.NoError(t, err)
	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	_, err = s.Take(ctx, policy, "k", 1)
	elapsed := time.Since(start)
	require.Error(t, err)
	assert.Less(t, elapsed, 50*time.Millisecond+slack, "the deadline, not the client's 3 s read timeout")
	assert.ErrorContains(t, err, "redisstore: no answer within Options.Timeout 50ms: ")
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	_, err = s.Take(short, policy, "k", 1)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "Options.Timeout", "the caller's deadline ended it")
}
