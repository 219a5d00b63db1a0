package ratelimit

import (
	"errors"
	"fmt"
	"slices"

	"github.com/tokenfair/ratelimit/internal/occupancy"
)

// Limiter applies one or more policies to keys, keeping their state in a
// store. A request passes only if every policy allows it, and one that a
// policy refuses spends nothing from the others
// (docs/algorithms.md#several-policies). A Limiter is safe for concurrent
// use.
type Limiter struct {
	store    Store
	policies []Policy
	all      []int    // indexes of every policy
	enforce  []int    // indexes of the enforcing policies
	dryRun   []int    // indexes of the dry-run policies
	names    []string // every policy's name
	units    []string // the policies' units, each once, in order of first use
	unitOf   []uint8  // of each policy, the index of its unit in units
	single   *Policy  // the only policy, if it is enforced and has no LimitFor; else nil
	boxes    []*box   // the policies' penalty boxes

	keyLimits []keyLimits // of each policy, when one has LimitFor; else nil

	occ occupancy.Counts // its requests waiting in shaping queues and holding in-flight slots
}

// New returns a Limiter that enforces policies with state kept in store.
// It returns an error, naming the value at fault, if store is nil, there
// is no policy, a policy is invalid, or two policies share a name.
func New(store Store, policies ...Policy) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("ratelimit: New: nil store")
	}
	if len(policies) == 0 {
		return nil, errors.New("ratelimit: New: no policy")
	}
	l := &Limiter{store: store}
	seen := map[string]bool{}
	for i, p := range policies {
		p, err := p.validate()
		if err != nil {
			return nil, err
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("ratelimit: New: two policies named %q", p.Name)
		}
		seen[p.Name] = true
		l.policies = append(l.policies, p)
		l.names = append(l.names, p.Name)
		u := slices.Index(l.units, p.Unit)
		if u < 0 {
			if len(l.units) == maxUnits {
				return nil, fmt.Errorf("ratelimit: New: policy %q: more than %d units", p.Name, maxUnits)
			}
			u = len(l.units)
			l.units = append(l.units, p.Unit)
		}
		l.unitOf = append(l.unitOf, uint8(u))
		l.all = append(l.all, i)
		if p.DryRun {
			l.dryRun = append(l.dryRun, i)
		} else {
			l.enforce = append(l.enforce, i)
		}
	}
	for i := range l.policies {
		if l.policies[i].Penalty != (Penalty{}) {
			l.boxes = append(l.boxes, newBox(i, &l.policies[i]))
		}
	}
	for i := range l.policies {
		if l.policies[i].LimitFor != nil {
			l.keyLimits = make([]keyLimits, len(l.policies))
		}
	}
	if len(l.policies) == 1 && len(l.enforce) == 1 && l.boxes == nil && l.keyLimits == nil {
		l.single = &l.policies[0]
	}
	return l, nil
}

// maxUnits bounds the units of a Limiter's policies, so that a set of them
// is a bit mask.
const maxUnits = 32

// Policies returns the limiter's policies, with defaults filled in. The
// slice is shared: do not modify it.
func (l *Limiter) Policies() []Policy { return l.policies }
