package metrics

import (
	"fmt"

	"github.com/tokenfair/ratelimit/internal/outcome"
)

// SetNearLimit sets the fraction, in (0, 1], of a policy's burst under
// which an allowed decision counts in ratelimit_near_limit_total: one that
// left fewer than fraction × burst whole tokens. The default is 0.2 (with
// a burst of 10, 1 or 0 tokens left). The test is exact: 0.2 is a fifth.
// SetNearLimit is safe to call while the metrics observe decisions.
func (m *Metrics) SetNearLimit(fraction float64) error {
	if !(fraction > 0 && fraction <= 1) { // NaN fails both
		return fmt.Errorf("metrics: SetNearLimit(%v): the fraction of the burst must be in (0, 1]", fraction)
	}
	m.nearFraction.Store(outcome.Units(fraction))
	return nil
}
