package ratelimit_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/failover"
)

// resetRecorder is a ResetStore that allows every request and records the
// buckets it is asked to forget, failing for the policies in fail.
type resetRecorder struct {
	fail map[string]error

	mu    sync.Mutex
	reset []string // "policy/key"
}

func (s *resetRecorder) Take(_ context.Context, p *ratelimit.Policy, _ string, _ int64) (ratelimit.Result, error) {
	return ratelimit.Result{Allowed: true, Policy: p, Remaining: p.Limit.Burst()}, nil
}

func (s *resetRecorder) Reset(_ context.Context, p *ratelimit.Policy, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reset = append(s.reset, p.Name+"/"+key)
	return s.fail[p.Name]
}

// takeOnly is a Store without Reset.
type takeOnly struct{}

func (takeOnly) Take(_ context.Context, p *ratelimit.Policy, _ string, _ int64) (ratelimit.Result, error) {
	return ratelimit.Result{Allowed: true, Policy: p}, nil
}

var resetPolicies = []ratelimit.Policy{
	{Name: "burst", Limit: ratelimit.PerSecond(5)},
	{Name: "global", Limit: ratelimit.PerSecond(100), Global: true},
	{Name: "daily", Limit: ratelimit.Per(1000, 24*time.Hour)},
	{Name: "shadow", Limit: ratelimit.Per(10, time.Minute), DryRun: true},
}

// Reset asks the store to forget the key under every policy but the Global
// one, whose bucket every client shares.
func TestResetSkipsGlobalPolicies(t *testing.T) {
	s := &resetRecorder{}
	l := newEngine(t, setup{policies: resetPolicies, store: s}).lim
	require.NoError(t, l.Reset(context.Background(), "client-1"))
	assert.Equal(t, []string{"burst/client-1", "daily/client-1", "shadow/client-1"}, s.reset)
}

func TestResetEmptyKey(t *testing.T) {
	s := &resetRecorder{}
	l := newEngine(t, setup{policies: resetPolicies, store: s}).lim
	err := l.Reset(context.Background(), "")
	assert.ErrorIs(t, err, ratelimit.ErrMissingKey)
	assert.Empty(t, s.reset, "nothing reset")
}

// A store that cannot forget a key makes Reset fail, naming its type; it is
// not a failure of the store.
func TestResetStoreWithoutReset(t *testing.T) {
	l := newEngine(t, setup{policies: resetPolicies[:1], store: takeOnly{}}).lim
	err := l.Reset(context.Background(), "client-1")
	require.Error(t, err)
	assert.EqualError(t, err, "ratelimit: Reset: the store, a ratelimit_test.takeOnly, cannot forget a key (unsupported operation): it does not implement ResetStore")
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	assert.NotErrorIs(t, err, ratelimit.ErrStore)

	// Nor is it when the store that cannot is behind a failover store.
	fs, err := failover.New(takeOnly{}, &failover.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	l = newEngine(t, setup{policies: resetPolicies[:1], store: fs}).lim
	err = l.Reset(context.Background(), "client-1")
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	assert.NotErrorIs(t, err, ratelimit.ErrStore)
	assert.ErrorContains(t, err, "failover: Reset: the primary store, a ratelimit_test.takeOnly, cannot forget a key")
}

// A store's failure wraps ErrStore and names the policy; the other policies
// are still reset.
func TestResetStoreFails(t *testing.T) {
	down := errors.New("connection refused")
	s := &resetRecorder{fail: map[string]error{"burst": down}}
	l := newEngine(t, setup{policies: resetPolicies, store: s}).lim
	err := l.Reset(context.Background(), "client-1")
	require.Error(t, err)
	assert.ErrorIs(t, err, ratelimit.ErrStore)
	assert.ErrorIs(t, err, down)
	assert.EqualError(t, err, `ratelimit: store failed: Reset: policy "burst": connection refused`)
	assert.Equal(t, []string{"burst/client-1", "daily/client-1", "shadow/client-1"}, s.reset, "every policy tried")
}

// An error that already wraps ErrStore (a failover failing closed) is not
// wrapped twice.
func TestResetStoreErrorWrapsErrStoreOnce(t *testing.T) {
	closed := errors.Join(ratelimit.ErrStore, errors.New("failing closed"))
	s := &resetRecorder{fail: map[string]error{"burst": closed, "daily": closed}}
	l := newEngine(t, setup{policies: resetPolicies, store: s}).lim
	err := l.Reset(context.Background(), "client-1")
	assert.ErrorIs(t, err, ratelimit.ErrStore)
	assert.NotContains(t, err.Error(), "store failed: Reset", "wrapped once")
	assert.Contains(t, err.Error(), `policy "burst"`)
	assert.Contains(t, err.Error(), `policy "daily"`)
}
