// Package outcome classifies a decision as the observers of this
// repository count it (package metrics for Prometheus, otellimit for
// OpenTelemetry), so that the two count alike: the outcome of each policy,
// a ban's refusal, and whether an allowed decision left the policy near
// its limit.
package outcome

import (
	"math/bits"
	"strconv"
	"strings"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
)

// Outcome is what a decision was for one policy.
type Outcome uint8

// The outcomes, in the order of Names.
const (
	Allowed       Outcome = iota
	Limited               // refused by the policy (by its local share too)
	Banned                // refused by its penalty box
	DryRunLimited         // what a dry-run policy would have refused
	Fallback              // allowed unchecked while the store failed (failover.Open)
	Local                 // allowed by failover.Local's share while the store failed
	StoreError            // no decision: the store failed
	Invalid               // no decision: no key, a bad cost
	N                     // the number of outcomes
)

// Names are the outcomes' names, as both observers write them.
var Names = [N]string{"allowed", "limited", "banned", "dry_run_limited", "fallback", "local", "store_error", "invalid"}

// Of returns the outcome for p of a decision in which p's own result was
// own.
func Of(p *ratelimit.Policy, own ratelimit.Result) Outcome {
	switch {
	case !own.Allowed && p.DryRun:
		return DryRunLimited
	case !own.Allowed:
		return Limited
	case own.Local:
		return Local
	case own.Degraded:
		return Fallback
	}
	return Allowed
}

// IsBan reports whether res is the refusal of a penalty box's ban: its
// only result is the ban's.
func IsBan(res ratelimit.Result) bool {
	return len(res.Results) == 1 && res.Results[0].Policy != nil && res.Results[0].Policy.Algorithm == algo.Ban
}

// Scale is the denominator of a near-limit fraction, which is kept as a
// whole number of 1e-18ths so that the test is exact integer arithmetic.
const Scale = 1_000_000_000_000_000_000

// DefaultNear is the default near-limit fraction, 0.2, in 1e-18ths.
const DefaultNear = Scale / 5

// Units returns f, a number in (0, 1], in 1e-18ths: the shortest decimal
// that prints as f, rounded up to 18 decimal places.
func Units(f float64) uint64 {
	whole, frac, _ := strings.Cut(strconv.FormatFloat(f, 'f', -1, 64), ".")
	if whole != "0" {
		return Scale // f is 1
	}
	up := len(frac) > 18 && strings.Trim(frac[18:], "0") != ""
	n, _ := strconv.ParseUint((frac + "000000000000000000")[:18], 10, 64)
	if up {
		n++
	}
	return n
}

// Near reports whether remaining < fraction × burst, for a fraction of
// units 1e-18ths: remaining × 1e18 < units × burst, in 128 bits.
func Near(remaining, burst int64, units uint64) bool {
	rh, rl := bits.Mul64(uint64(remaining), Scale)
	bh, bl := bits.Mul64(uint64(burst), units)
	return rh < bh || rh == bh && rl < bl
}

// DecisionSeconds returns the bucket boundaries, in seconds, of both
// observers' histogram of the time a decision takes: µs for a memory
// store, ms for Redis, up to a store's deadline.
func DecisionSeconds() []float64 {
	return []float64{.00001, .00005, .0001, .0005, .001, .005, .01, .05, .1, .5}
}

// QueueSeconds returns the bucket boundaries, in seconds, of both
// observers' histogram of the waits in shaping queues: ms to 10 s.
func QueueSeconds() []float64 {
	return []float64{.001, .01, .05, .1, .25, .5, 1, 2.5, 5, 10}
}
