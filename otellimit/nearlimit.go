package otellimit

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// nearScale is the denominator of the near-limit fraction, which is kept
// as a whole number of 1e-18ths so that the test is exact integer
// arithmetic (as in package metrics).
const nearScale = 1_000_000_000_000_000_000

// defaultNearLimit is 0.2 in 1e-18ths.
const defaultNearLimit = nearScale / 5

// SetNearLimit sets the fraction, in (0, 1], of a policy's burst under
// which an allowed decision counts in rate_limiting.near_limit_requests:
// one that left fewer than fraction × burst whole tokens. The default is
// 0.2 (with a burst of 10, 1 or 0 tokens left). The test is exact: 0.2 is
// a fifth. SetNearLimit is safe to call while the metrics observe
// decisions.
func (m *Metrics) SetNearLimit(fraction float64) error {
	if !(fraction > 0 && fraction <= 1) { // NaN fails both
		return fmt.Errorf("otellimit: SetNearLimit(%v): the fraction of the burst must be in (0, 1]", fraction)
	}
	m.nearFraction.Store(nearUnits(fraction))
	return nil
}

// nearUnits returns f, a number in (0, 1], in 1e-18ths: the shortest
// decimal that prints as f, rounded up to 18 decimal places.
func nearUnits(f float64) uint64 {
	whole, frac, _ := strings.Cut(strconv.FormatFloat(f, 'f', -1, 64), ".")
	if whole != "0" {
		return nearScale // f is 1
	}
	up := len(frac) > 18 && strings.Trim(frac[18:], "0") != ""
	n, _ := strconv.ParseUint((frac + "000000000000000000")[:18], 10, 64)
	if up {
		n++
	}
	return n
}

// nearLimit reports whether remaining < fraction × burst, for a fraction
// of units 1e-18ths: remaining × 1e18 < units × burst, in 128 bits.
func nearLimit(remaining, burst int64, units uint64) bool {
	rh, rl := bits.Mul64(uint64(remaining), nearScale)
	bh, bl := bits.Mul64(uint64(burst), units)
	return rh < bh || rh == bh && rl < bl
}
