package ratelimit

import (
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// Penalty is a policy's penalty box: a key the policy keeps refusing is
// banned, all its requests refused, until the ban ends. The zero value
// bans nobody. A ban lives in the store, on every instance sharing it;
// [Limiter.Reset] lifts it. docs/policies.md says exactly what bans.
type Penalty struct {
	// After, at least 1, is the number of refusals that bans a key.
	// Zero, the default, turns the penalty box off.
	After int64
	// Within is the span in which After refusals ban (positive if After > 1).
	Within time.Duration
	// For is how long a ban lasts: positive, at most 50 years.
	For time.Duration
	// Max, when longer than For, makes bans back off: For doubled for each
	// earlier ban the key still has, up to Max (at most 50 years); a key
	// forgets one ban every 2 × Max. Zero (default): no back-off.
	Max time.Duration
}

// validate checks the penalty of p, a policy being validated.
func (b Penalty) validate(p *Policy) error {
	switch {
	case b == Penalty{}:
		return nil
	case b.After < 1:
		return fmt.Errorf("Penalty.After %d: want at least 1 refusal, or a zero Penalty", b.After)
	case b.For <= 0:
		return fmt.Errorf("Penalty.For %v: want a positive ban", b.For)
	case b.After > 1 && b.Within <= 0:
		return fmt.Errorf("Penalty.Within %v: want a positive span", b.Within)
	case b.For > maxSpan:
		return fmt.Errorf("Penalty.For %v: want at most %v (50 years)", b.For, maxSpan)
	case b.Max != 0 && b.Max < b.For:
		return fmt.Errorf("Penalty.Max %v: want 0 or at least Penalty.For %v", b.Max, b.For)
	case b.Max > maxSpan:
		return fmt.Errorf("Penalty.Max %v: want at most %v (50 years)", b.Max, maxSpan)
	case p.Global:
		return errors.New("Penalty on a Global policy would ban every client at once")
	case p.DryRun:
		return errors.New("Penalty on a DryRun policy, which refuses nothing")
	}
	if b.After > 1 {
		if err := Per(b.After-1, b.Within).validate(); err != nil {
			return fmt.Errorf("Penalty: %d strikes within %v: %w", b.After-1, b.Within, err)
		}
	}
	if bans := b.bans(p.Name); bans != nil && bans.Limit.validate() != nil {
		return fmt.Errorf("Penalty.Max %v with For %v: remembering %d bans for 2 × Max each spans more than 50 years; want a shorter Max or a longer For",
			b.Max, b.For, bans.Limit.burst)
	}
	return nil
}

// bans returns the policy that counts the bans of the policy named name,
// for the back-off, or nil when bans do not back off: a bucket of levels +
// 1 bans that forgets one every 2 × Max, where levels is the least number
// of doublings with For << levels ≥ Max.
func (b Penalty) bans(name string) *Policy {
	if b.Max <= b.For {
		return nil
	}
	levels := int64(bits.Len64(uint64((b.Max - 1) / b.For)))
	return &Policy{Name: name + "/bans", Limit: Per(1, 2*b.Max).WithBurst(levels + 1), Algorithm: strikes}
}

// A box is the penalty box of one of a Limiter's policies: the policies of
// its state.
type box struct {
	policy  int     // the index of the policy it punishes
	strikes *Policy // the strikes' bucket; nil when one refusal bans
	bans    *Policy // the bans remembered, for the back-off (see Penalty.bans); nil without
	ban     Policy  // the ban
}

// newBox returns the penalty box of the i-th policy p, which has one.
func newBox(i int, p *Policy) *box {
	b := &box{policy: i, ban: Policy{Name: p.Name + "/ban", Limit: Per(1, time.Nanosecond), Algorithm: ban}}
	pen := p.Penalty
	if pen.After > 1 {
		b.strikes = &Policy{Name: p.Name + "/strikes", Limit: Per(pen.After-1, pen.Within).WithBurst(pen.After - 1), Algorithm: strikes}
	}
	b.bans = pen.bans(p.Name)
	return b
}
