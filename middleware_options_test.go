package ratelimit_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/tokenfair/ratelimit"
)

// RetryJitter is at most an hour: more is an error naming the value, and
// the longest Duration is one (it overflowed the wait it was added to).
func TestRetryJitterBound(t *testing.T) {
	lim := newHarness(t, setup{limit: ratelimit.PerSecond(1)}).lim
	_, err := ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{RetryJitter: time.Hour})
	assert.NoError(t, err, "an hour is allowed")
	for _, j := range []time.Duration{time.Hour + time.Nanosecond, 50 * 365 * 24 * time.Hour, math.MaxInt64} {
		_, err = ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{RetryJitter: j})
		assert.EqualError(t, err, "ratelimit: MiddlewareOptions.RetryJitter "+j.String()+": want a duration from 0 to 1h0m0s")
	}
}

// Every field of Options is optional: nil, the zero Options and nil hooks
// are the defaults.
func TestOptionsDefaults(t *testing.T) {
	for name, opts := range map[string]*ratelimit.MiddlewareOptions{
		"nil":       nil,
		"zero":      {},
		"nil hooks": {Cost: nil, OnDeny: nil, OnError: nil, LimiterFor: nil, Skip: nil, CountIf: nil, Observe: nil, Logger: nil},
	} {
		s := newHarness(t, setup{limit: ratelimit.Per(1, time.Minute), opts: opts})
		assert.False(t, s.m.CountsResponses(), name)
		w := s.get(name)
		assert.Equal(t, 200, w.Code, name)
		assert.Equal(t, `"default";q=1;w=60`, field(w.Header(), "RateLimit-Policy"), "%s: IETF header fields", name)
		w = s.get(name)
		assert.Equal(t, 429, w.Code, name)
		assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"), "%s: the default deny answer", name)
	}
}

// An invalid option is an error of NewMiddleware that names the field and
// the value at fault.
func TestOptionsErrors(t *testing.T) {
	lim := newHarness(t, setup{limit: ratelimit.PerSecond(1)}).lim
	for _, tc := range []struct {
		opts ratelimit.MiddlewareOptions
		want string
	}{
		{ratelimit.MiddlewareOptions{Headers: 99}, "MiddlewareOptions.Headers: unknown format 99"},
		{ratelimit.MiddlewareOptions{RetryJitter: -time.Second}, "MiddlewareOptions.RetryJitter -1s"},
		{ratelimit.MiddlewareOptions{MaxInFlight: -1, MaxInFlightTotal: 2}, "MiddlewareOptions.MaxInFlight -1"},
		{ratelimit.MiddlewareOptions{MaxInFlight: 1, MaxInFlightTotal: -3}, "MaxInFlightTotal -3"},
		{ratelimit.MiddlewareOptions{MaxInFlight: 1, Slots: failingSlots{}}, "MiddlewareOptions.SlotLease 0s"},
		{ratelimit.MiddlewareOptions{MaxInFlight: 1, Slots: failingSlots{}, SlotLease: -time.Second}, "MiddlewareOptions.SlotLease -1s"},
		{ratelimit.MiddlewareOptions{Slots: failingSlots{}, SlotLease: time.Second}, "MiddlewareOptions.Slots without MaxInFlight"},
		{ratelimit.MiddlewareOptions{MaxInFlight: 1, Slots: failingSlots{}, SlotLease: time.Second}, `MiddlewareOptions.SlotName "": want 1 to 64 characters`},
		{ratelimit.MiddlewareOptions{MaxInFlight: 1, Slots: failingSlots{}, SlotLease: time.Second, SlotName: "up:load"}, `MiddlewareOptions.SlotName "up:load"`},
		{ratelimit.MiddlewareOptions{MaxInFlight: 1, SlotName: "uploads"}, `MiddlewareOptions.SlotName "uploads" without Slots`},
	} {
		_, err := ratelimit.NewMiddleware(lim, keyByHeader, &tc.opts)
		assert.ErrorContains(t, err, tc.want, "NewMiddleware(%+v)", tc.opts)
	}
}
