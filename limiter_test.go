package ratelimit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tokenfair/ratelimit"
)

func TestConstructorErrors(t *testing.T) {
	good := ratelimit.Policy{Limit: ratelimit.PerSecond(1)}
	store := newEngine(t, setup{policies: []ratelimit.Policy{good}}).store
	for name, p := range map[string]ratelimit.Policy{
		"invalid limit":   {Limit: ratelimit.PerSecond(0)},
		"zero limit":      {},
		"bad name":        {Name: `a"b`, Limit: ratelimit.PerSecond(1)},
		"long name":       {Name: string(make([]byte, 65)), Limit: ratelimit.PerSecond(1)},
		"bad algorithm":   {Limit: ratelimit.PerSecond(1), Algorithm: 42},
		"burst overflows": {Limit: ratelimit.Per(1, time.Hour).WithBurst(1 << 50)},
	} {
		_, err := ratelimit.New(store, p)
		assert.Error(t, err, name)
	}
	_, err := ratelimit.New(nil, good)
	assert.ErrorContains(t, err, "nil store")
	lim, err := ratelimit.New(store, good)
	require.NoError(t, err)
	assert.Equal(t, "default", lim.Policies()[0].Name)

	_, err = ratelimit.NewMiddleware(nil, keyByHeader, nil)
	assert.ErrorContains(t, err, "nil limiter")
	_, err = ratelimit.NewMiddleware(lim, nil, nil)
	assert.ErrorContains(t, err, "nil key function")
}

func TestPolicyConstructorErrors(t *testing.T) {
	store := newEngine(t, setup{policies: []ratelimit.Policy{perKey}}).store
	_, err := ratelimit.New(store)
	assert.ErrorContains(t, err, "no policy")
	_, err = ratelimit.New(store, perKey, perKey)
	assert.ErrorContains(t, err, `two policies named "per-key"`)
	_, err = ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(1), Immediate: 1})
	assert.ErrorContains(t, err, "apply to leaky-shape only")
	_, err = ratelimit.NewMiddleware(nil, keyByHeader, nil)
	assert.Error(t, err)
}
