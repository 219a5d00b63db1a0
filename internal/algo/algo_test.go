package algo

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAdd(t *testing.T) {
	for _, tc := range []struct{ a, b, want int64 }{
		{1, 2, 3},
		{math.MaxInt64, 1, math.MaxInt64},
		{math.MaxInt64 - 5, 10, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{math.MinInt64, -1, math.MinInt64},
		{math.MaxInt64, -1, math.MaxInt64 - 1},
		{-5, 3, -2},
	} {
		assert.Equal(t, tc.want, Add(tc.a, tc.b), "Add(%d, %d)", tc.a, tc.b)
	}
}

func TestMul(t *testing.T) {
	for _, tc := range []struct{ a, b, want int64 }{
		{0, math.MaxInt64, 0},
		{3, 7, 21},
		{math.MaxInt64, 1, math.MaxInt64},
		{math.MaxInt64 - 1, 2, math.MaxInt64},
		{1 << 62, 2, math.MaxInt64},
		{1 << 31, 1 << 31, 1 << 62},
		{1 << 32, 1 << 32, math.MaxInt64},
		{3_037_000_499, 3_037_000_499, 3_037_000_499 * 3_037_000_499},
		{3_037_000_500, 3_037_000_500, math.MaxInt64},
	} {
		assert.Equal(t, tc.want, Mul(tc.a, tc.b), "Mul(%d, %d)", tc.a, tc.b)
	}
}
