package ratelimit_test

import (
	"testing"

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
