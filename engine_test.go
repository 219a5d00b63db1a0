package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/storetest"
)

// engine is a Limiter under test, without HTTP: its store and its clock.
// The tests of the engine use it alone; a harness (the HTTP half's tests)
// puts a Middleware in front of one.
type engine struct {
	clock *storetest.Clock // the memory store's clock; nil with a store or a limiter of the test's, or realClock
	store ratelimit.Store  // the limiter's; nil with s.limiter
	lim   *ratelimit.Limiter
}

// newEngine builds the engine of s's limit, policies, store, realClock,
// wrap and limiter; the other fields of s are the HTTP half's.
func newEngine(t *testing.T, s setup) *engine {
	t.Helper()
	e := &engine{store: s.store, lim: s.limiter}
	if e.lim != nil {
		return e
	}
	if e.store == nil {
		var opts *memorystore.Options
		if !s.realClock {
			e.clock = new(storetest.Clock)
			opts = &memorystore.Options{Clock: e.clock.Now}
		}
		store, err := memorystore.New(opts)
		require.NoError(t, err)
		e.store = store
	}
	if s.wrap != nil {
		e.store = s.wrap(e.store)
	}
	policies := s.policies
	if policies == nil {
		policies = []ratelimit.Policy{{Limit: s.limit}}
	}
	var err error
	e.lim, err = ratelimit.New(e.store, policies...)
	require.NoError(t, err)
	return e
}

var (
	perKey = ratelimit.Policy{Name: "per-key", Limit: ratelimit.PerSecond(5).WithBurst(10)}
	daily  = ratelimit.Policy{Name: "daily", Limit: ratelimit.Per(10000, 24*time.Hour)}
	global = ratelimit.Policy{Name: "global", Limit: ratelimit.PerSecond(200).WithBurst(4), Global: true}
)

// remaining returns what key has left under lim's policies, in order,
// looking without spending.
func remaining(t *testing.T, lim *ratelimit.Limiter, key string) []int64 {
	t.Helper()
	res, err := lim.Take(context.Background(), key, 0)
	require.NoError(t, err)
	if res.Results == nil {
		return []int64{res.Remaining}
	}
	var left []int64
	for _, r := range res.Results {
		left = append(left, r.Remaining)
	}
	return left
}

// look returns key's result under lim's only policy, without spending.
func look(t *testing.T, lim *ratelimit.Limiter, key string) ratelimit.Result {
	t.Helper()
	res, err := lim.Take(context.Background(), key, 0)
	require.NoError(t, err)
	return res
}

// waitExactly checks that key's request of cost is refused with a wait of
// exactly wait, and still a nanosecond before its end, and allowed at it;
// it leaves h's clock there and returns the allowed Result.
func waitExactly(t *testing.T, h *engine, key string, cost int64, wait time.Duration) ratelimit.Result {
	t.Helper()
	ctx := context.Background()
	res, err := h.lim.Take(ctx, key, cost)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "Take(%q, %d)", key, cost)
	assert.Equal(t, wait, res.RetryAfter, "Take(%q, %d).RetryAfter", key, cost)
	h.clock.Advance(wait - 1)
	res, err = h.lim.Take(ctx, key, cost)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "Take(%q, %d) a nanosecond early", key, cost)
	assert.Equal(t, time.Duration(1), res.RetryAfter, "Take(%q, %d) a nanosecond early", key, cost)
	h.clock.Advance(1)
	res, err = h.lim.Take(ctx, key, cost)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "Take(%q, %d) at the end of the wait", key, cost)
	return res
}

// meters returns a limiter of three units on a memory store whose clock
// does not move: 10 requests, 100 tokens and 1000 bytes a minute.
func meters(t *testing.T) *ratelimit.Limiter {
	t.Helper()
	store, err := memorystore.New(&memorystore.Options{Clock: new(storetest.Clock).Now})
	require.NoError(t, err)
	lim, err := ratelimit.New(store,
		ratelimit.Policy{Name: "calls", Limit: ratelimit.Per(10, time.Minute)},
		ratelimit.Policy{Name: "tokens", Limit: ratelimit.Per(100, time.Minute), Unit: "tokens"},
		ratelimit.Policy{Name: "bytes", Limit: ratelimit.Per(1000, time.Minute), Unit: "content-bytes"})
	require.NoError(t, err)
	return lim
}
