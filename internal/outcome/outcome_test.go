package outcome

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestUnits: a fraction is the decimal it prints as, rounded up to 18
// places, never to 0.
func TestUnits(t *testing.T) {
	for _, tc := range []struct {
		fraction float64
		want     uint64
	}{
		{1, 1e18},
		{0.2, 2e17},
		{0.07, 7e16},
		{0.123456789012345678, 123456789012345680}, // prints as 0.12345678901234568
		{1e-18, 1},
		{1e-20, 1}, // rounded up, never to 0
		{0.0033333333333333335, 3333333333333334},  // 19 places, rounded up
		{math.Nextafter(1, 0), 999999999999999900}, // prints as 0.9999999999999999
	} {
		assert.Equal(t, tc.want, Units(tc.fraction), "Units(%v)", tc.fraction)
	}
}

// TestNear: the test is exact integer arithmetic, in 128 bits.
func TestNear(t *testing.T) {
	const maxInt = math.MaxInt64
	for _, tc := range []struct {
		remaining, burst int64
		units            uint64
		want             bool
	}{
		{1, 10, 2e17, true},
		{2, 10, 2e17, false}, // 2 < 2 is false: exact, whatever float64 would say
		{0, 1, 1, true},
		{maxInt - 1, maxInt, 1e18, true},
		{maxInt, maxInt, 1e18, false},
		{maxInt / 5, maxInt, 2e17, true}, // maxInt/5 rounds down, below maxInt × 0.2
		{maxInt/5 + 1, maxInt, 2e17, false},
	} {
		assert.Equal(t, tc.want, Near(tc.remaining, tc.burst, tc.units), "Near(%d, %d, %d)", tc.remaining, tc.burst, tc.units)
	}
}
