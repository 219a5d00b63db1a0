package ratelimit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit/internal/algo"
)

// TestNoOverflowAtTheLongestSpan: with a limit of maxSpan, a state a whole
// span ahead and the clock in 2161, now plus two spans stays inside int64:
// the token bucket refuses with a wait of exactly one span, and the queue
// admits the request one span from now, moves on to two spans from now, and
// then is full.
func TestNoOverflowAtTheLongestSpan(t *testing.T) {
	now := time.Date(2161, 12, 31, 0, 0, 0, 0, time.UTC).UnixNano()
	span := maxSpan
	limit := Per(1, span)
	require.NoError(t, limit.validate(), "the longest span is a valid Limit")

	res, state := (&Policy{Limit: limit}).Decide(now+int64(span), now, 1)
	assert.False(t, res.Allowed)
	assert.Equal(t, now+int64(span), state)
	assert.Equal(t, span, res.RetryAfter)
	assert.Equal(t, span, res.ResetAfter)

	shaper := &Policy{Limit: limit, Algorithm: LeakyShape}
	res, state = shaper.Decide(now+int64(span), now, 1)
	assert.True(t, res.Allowed)
	assert.Equal(t, now+2*int64(span), state)
	assert.Equal(t, span, res.Delay)
	assert.Equal(t, 2*span, res.ResetAfter)
	// A state that had wrapped around would look long past: the queue empty.
	assert.Greater(t, state, now)
	res, _ = shaper.Decide(state, now, 1)
	assert.False(t, res.Allowed, "the queue is full")
}

// The penalty box's own algorithms are internal/algo's values, after the
// three exported ones, and New refuses them in a Policy, naming them.
func TestPenaltyAlgorithms(t *testing.T) {
	assert.Equal(t, algo.Ban, int(ban))
	assert.Equal(t, algo.Strikes, int(strikes))
	assert.Equal(t, LeakyShape+1, ban, "the first value after the exported ones")
	for _, a := range []Algorithm{ban, strikes} {
		_, err := New(nopStore{}, Policy{Limit: PerSecond(1), Algorithm: a})
		assert.ErrorContains(t, err, "the algorithm "+a.name()+" is a penalty box's own")
	}
	p := Policy{Limit: PerSecond(2).WithBurst(3), Algorithm: strikes}
	tb := p
	tb.Algorithm = TokenBucket
	for _, cost := range []int64{0, 1, 3, 4} {
		want, wantNext := tb.Decide(5e8, 1e8, cost)
		got, next := p.Decide(5e8, 1e8, cost)
		want.Policy = got.Policy
		assert.Equal(t, want, got, "strikes decide cost %d as TokenBucket", cost)
		assert.Equal(t, wantNext, next)
	}
}
