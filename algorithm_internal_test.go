package ratelimit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
