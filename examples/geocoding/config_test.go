package main

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// limitOf keeps the interval of earlier versions, 1s/rate rounded to the
// nanosecond, and writes the rate so that the w of RateLimit-Policy is
// ⌈burst/rate⌉.
func TestLimitOf(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		burst int64
		want  string
	}{
		{5, 10, "5/s burst 10"},
		{1, 2, "1/s burst 2"},
		{1000, 10, "1000/s burst 10"},
		{0.5, 1, "1/2s"},
		{0.25, 3, "1/4s burst 3"},
		{0.01, 3, "1/1m40s burst 3"},
		{0.001, 50, "1/16m40s burst 50"},
		{1.7, 5, "17/10s burst 5"},
		{7, 7, "7/s"},
		{1e6, 1, "1000000/s burst 1"},
		{1.0 / 3, 10, "10/30s"},
		{math.Pi, 4, "4/1.273239545s"},
	} {
		l, err := limitOf(tc.rate, tc.burst)
		require.NoError(t, err, "limitOf(%v, %d)", tc.rate, tc.burst)
		assert.Equal(t, tc.want, l.String(), "limitOf(%v, %d)", tc.rate, tc.burst)
		assert.Equal(t, time.Duration(math.Round(1e9/tc.rate)), l.Interval(), "limitOf(%v, %d).Interval()", tc.rate, tc.burst)
		assert.Equal(t, tc.burst, l.Burst(), "limitOf(%v, %d).Burst()", tc.rate, tc.burst)
	}
	for _, rate := range []float64{0, -1, math.NaN(), math.Inf(1), 3e9} {
		_, err := limitOf(rate, 10)
		assert.Error(t, err, "limitOf(%v, 10)", rate)
	}
}
