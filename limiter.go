package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/tokenfair/ratelimit/internal/clientkey"
	"github.com/tokenfair/ratelimit/internal/occupancy"
)

// Limiter applies one or more policies to keys, keeping their state in a
// store. A request passes only if every policy allows it, and a request
// one policy refuses spends nothing from the others: a [BatchStore]
// decides them in one step; otherwise what was taken before the refusal
// is given back (concurrent requests may briefly see it spent), never lost
// nor spent twice. A Limiter is safe for concurrent use.
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

// bucketKey returns the key of the bucket of key under p.
func bucketKey(p *Policy, key string) string {
	if p.Global {
		return globalKey
	}
	return key
}

// take has the store decide key under p. A Result a store built without
// its Policy gets the one it was asked about.
func (l *Limiter) take(ctx context.Context, p *Policy, key string, cost int64) (res Result, err error) {
	if res, err = l.store.Take(ctx, p, bucketKey(p, key), cost); err == nil && res.Policy == nil {
		res.Policy = p
	}
	return res, err
}

// Take spends cost from key's bucket under every policy, whatever its
// Unit, if each holds it. A cost of 0 reports the state without spending.
// It returns an error wrapping ErrMissingKey for an empty key,
// ErrBadRequest for a negative cost or one that an enforcing policy could
// never allow, and ErrStore when the store fails.
func (l *Limiter) Take(ctx context.Context, key string, cost int64) (res Result, err error) {
	p := l.single
	if p == nil || key == "" || cost < 0 || cost > p.Limit.burst {
		return l.takeRound(ctx, &round{key: key, cost: cost})
	}
	// l.take(ctx, p, key, cost), by hand: the call would not be inlined.
	if res, err = l.store.Take(ctx, p, bucketKey(p, key), cost); err != nil {
		return Result{}, storeError(err)
	}
	if res.Policy == nil {
		res.Policy = p
	}
	return res, nil
}

// TakeUnits is Take with a cost for each unit: every policy spends
// costs[its Unit], or 1 where costs has no entry for its unit, all or
// nothing. It also returns an error for a unit of costs that no policy
// counts.
func (l *Limiter) TakeUnits(ctx context.Context, key string, costs map[string]int64) (Result, error) {
	byUnit, found := make([]int64, len(l.units)), 0
	for u, name := range l.units {
		c, ok := costs[name]
		if ok {
			found++
		} else {
			c = 1
		}
		byUnit[u] = c
	}
	if found < len(costs) {
		for u := range costs {
			if !slices.Contains(l.units, u) {
				return Result{}, fmt.Errorf("ratelimit: TakeUnits: no policy counts the unit %q (the units: %q)", u, l.units)
			}
		}
	}
	return l.takeRound(ctx, &round{key: key, costs: byUnit})
}

// round is one request's decision under a Limiter's policies: its key,
// what each policy is to spend, and, once decided, each one's result (an
// allowed one spent its policy's cost).
type round struct {
	key     string
	cost    int64   // every policy's cost, without costs
	costs   []int64 // the cost in each unit (Limiter.units), or nil
	results []Result
}

// costOf returns what policy i of l spends in rd.
func (rd *round) costOf(l *Limiter, i int) int64 {
	if rd.costs == nil {
		return rd.cost
	}
	return rd.costs[l.unitOf[i]]
}

// takeRound is Take for a Limiter of several policies, or of one that is
// dry-run or has LimitFor, for a key or cost that Take cannot decide, and
// for costs by unit.
func (l *Limiter) takeRound(ctx context.Context, rd *round) (Result, error) {
	if rd.key == "" {
		return Result{}, errEmptyKey
	}
	if len(l.policies) == 1 && len(l.enforce) == 1 && l.boxes == nil {
		// One policy, with LimitFor: without the lists of several.
		p, err := l.policyFor(0, rd.key)
		cost := rd.costOf(l, 0)
		if err == nil {
			err = checkCost(p, cost)
		}
		if err != nil {
			return Result{}, err
		}
		res, err := l.take(ctx, p, rd.key, cost)
		if err != nil {
			return Result{}, storeError(err)
		}
		return res, nil
	}
	rd.results = make([]Result, len(l.policies))
	for i := range l.policies {
		p, err := l.policyFor(i, rd.key)
		if err != nil {
			return Result{}, err
		}
		rd.results[i].Policy = p
	}
	for _, i := range l.enforce {
		if err := checkCost(rd.results[i].Policy, rd.costOf(l, i)); err != nil {
			return Result{}, err
		}
	}
	for _, i := range l.dryRun {
		if c := rd.costOf(l, i); c < 0 {
			return Result{}, checkCost(rd.results[i].Policy, c)
		}
	}
	return l.takeMany(ctx, rd)
}

// storeError wraps a store's error with ErrStore, unless it already is one.
func storeError(err error) error {
	if errors.Is(err, ErrStore) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrStore, err)
}

// checkCost returns the error for a cost that p, an enforcing policy,
// cannot decide, with a detail that is safe to show the client.
func checkCost(p *Policy, cost int64) error {
	switch {
	case cost < 0:
		return &clientkey.Error{Err: fmt.Errorf("%w: negative cost %d", ErrBadRequest, cost), Kind: clientkey.KindCost,
			Detail: "the request's cost, " + strconv.FormatInt(cost, 10) + ", is negative"}
	case cost > p.Limit.burst:
		what := "cost"
		if p.Unit != requests && p.Unit != "" {
			what = "cost in " + p.Unit
		}
		return &clientkey.Error{
			Err:    fmt.Errorf("%w: %w: %s %d, policy %q has burst %d", ErrBadRequest, errCostExceedsBurst, what, cost, p.Name, p.Limit.burst),
			Kind:   clientkey.KindCostAboveBurst,
			Detail: fmt.Sprintf("the request's %s, %d, is above the burst of policy %q, %d", what, cost, p.Name, p.Limit.burst),
		}
	}
	return nil
}

// errEmptyKey is the refusal of an empty key.
var errEmptyKey = &clientkey.Error{Err: fmt.Errorf("%w: empty key", ErrMissingKey),
	Kind: clientkey.KindEmptyKey, Detail: "the key is empty"}

// takeMany is Take for a Limiter of several policies, or only dry-run ones,
// with the policy that decides rd's key under each in rd.results.
func (l *Limiter) takeMany(ctx context.Context, rd *round) (Result, error) {
	var allowed bool
	var err error
	if l.boxes == nil {
		allowed, err = l.takeAll(ctx, l.enforce, rd)
	} else {
		var ban Result
		var banned bool
		if allowed, ban, banned, err = l.takeBoxed(ctx, rd); banned && err == nil {
			return ban, nil
		}
	}
	if err != nil {
		return Result{}, storeError(err)
	}
	for _, i := range l.dryRun {
		p := rd.results[i].Policy
		cost := rd.costOf(l, i)
		c := cost
		if !allowed || cost > p.Limit.burst {
			c = 0 // the request does not happen, or could never pass: only look
		}
		res, err := l.take(ctx, p, rd.key, c)
		if err != nil {
			// A dry-run policy never refuses, not even when its store fails.
			rd.results[i] = Result{Allowed: true, Policy: p, Degraded: true}
			continue
		}
		if c != cost {
			res.Allowed, res.RetryAfter = p.wouldAllow(res, cost) // a look: would the cost have fit?
		}
		rd.results[i] = res
	}
	return l.combine(rd.results, allowed), nil
}

// takeAll takes rd's costs under the policies at idx, all or nothing, and
// writes their results over those that hold their policies.
func (l *Limiter) takeAll(ctx context.Context, idx []int, rd *round) (bool, error) {
	if bs, ok := l.store.(BatchStore); ok && len(idx) > 1 {
		all, _, err := l.batch(ctx, bs, idx, rd, nil)
		if !errors.Is(err, ErrNotAtomic) {
			return all, err
		}
	}
	all := true
	for k, i := range idx {
		res, err := l.take(ctx, rd.results[i].Policy, rd.key, rd.costOf(l, i))
		if err != nil {
			l.giveBackAll(ctx, idx[:k], rd)
			return false, err
		}
		rd.results[i] = res
		all = all && res.Allowed
	}
	if !all {
		l.giveBackAll(ctx, idx, rd)
	}
	return all, nil
}

// batch decides, in one TakeAll of bs (all or nothing), rd's costs under
// the policies at idx and the requests of extra. It writes the policies'
// results, reports whether they all allowed, and returns extra's results,
// whose refusals are the caller's to read. It returns bs's error, such as
// ErrNotAtomic, having decided nothing.
func (l *Limiter) batch(ctx context.Context, bs BatchStore, idx []int, rd *round, extra []BatchItem) (bool, []Result, error) {
	reqs := make([]BatchItem, len(idx), len(idx)+len(extra))
	for k, i := range idx {
		p := rd.results[i].Policy
		reqs[k] = BatchItem{Policy: p, Key: bucketKey(p, rd.key), Cost: rd.costOf(l, i)}
	}
	reqs = append(reqs, extra...)
	out := make([]Result, len(reqs))
	if err := bs.TakeAll(ctx, reqs, out); err != nil {
		return false, nil, err
	}
	all := true
	for k, i := range idx {
		if out[k].Policy == nil {
			out[k].Policy = rd.results[i].Policy
		}
		rd.results[i] = out[k]
		all = all && out[k].Allowed
	}
	return all, out[len(idx):], nil
}

// giveBack gives back through rs, under the policies at idx whose results
// allowed, rd's cost of each; nothing where a fallback decided (it never
// spent from the store). A failure to give back only leaves a bucket
// emptier than it should be (never fuller); the first is returned.
func (l *Limiter) giveBack(ctx context.Context, rs RefundStore, idx []int, rd *round) error {
	var first error
	for _, i := range idx {
		r := rd.results[i]
		if c := rd.costOf(l, i); c > 0 && r.Allowed && !r.Degraded && c <= r.Policy.Limit.burst {
			if err := rs.Refund(ctx, r.Policy, bucketKey(r.Policy, rd.key), c, r); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// giveBackAll gives back, regardless of ctx's cancellation, what the
// allowed results of rd among idx spent: a request refused by another
// policy.
func (l *Limiter) giveBackAll(ctx context.Context, idx []int, rd *round) {
	if rs, ok := l.store.(RefundStore); ok {
		_ = l.giveBack(context.WithoutCancel(ctx), rs, idx, rd)
	}
}

// Refund gives back cost tokens of took, an allowed Result of this
// Limiter's Take for key, under each policy, as x/time/rate's
// Reservation.Cancel does. The Refunds of one took must add up to at most
// what it spent under each policy, under the key Take was given: the
// Result cannot tell (of TakeUnits, whose costs differ, use Settle). It does nothing for cost ≤ 0, a refused
// or degraded took, or a store that is no [RefundStore]; its errors wrap
// ErrMissingKey (empty key) or ErrStore, or name the policy of a took of
// another Limiter.
func (l *Limiter) Refund(ctx context.Context, key string, cost int64, took Result) error {
	results, err := l.spent("Refund", key, took, false)
	rs, ok := l.store.(RefundStore)
	if err != nil || !ok || cost <= 0 || results == nil {
		return err
	}
	if err := l.giveBack(ctx, rs, l.all, &round{key: key, cost: cost, results: results}); err != nil {
		return storeError(err)
	}
	return nil
}

// Charge takes cost more tokens for took, an allowed Result of this
// Limiter's Take for key, whose request cost more than it reserved: even
// past empty, exactly, under the key's limit in force, so that the key's
// next requests wait until the debt is repaid (a calendar quota's debt
// ends at its reset). A took decided while the store failed is charged as
// the store's fallback decides (failover's Local mode charges its share).
// It does nothing for cost ≤ 0 or a refused took; its errors are Refund's.
func (l *Limiter) Charge(ctx context.Context, key string, cost int64, took Result) error {
	results, err := l.spent("Charge", key, took, true)
	if err != nil || cost <= 0 {
		return err
	}
	for i, r := range results {
		if r.Allowed {
			if err := l.charge(ctx, i, key, cost, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// charge takes cost past empty from key's bucket under policy i, which
// allowed took, under the key's limit in force.
func (l *Limiter) charge(ctx context.Context, i int, key string, cost int64, took Result) error {
	p, err := l.policyFor(i, key)
	if err != nil {
		p = took.Policy // the limit it was taken under
	}
	q := *p
	q.Algorithm = debt
	if _, err := l.take(ctx, &q, key, cost); err != nil {
		return storeError(err)
	}
	return nil
}

// Settle sets what took, an allowed Result of this Limiter's Take or
// TakeUnits for key that reserved reserved of unit, costs in unit, once
// that is known: each policy that counts unit gives back what it spent
// above cost, or takes the rest even past empty, as Charge does. An
// admitted request costs at least 1: a cost of 0 settles at 1. Settle
// each unit of a took once. It returns an error for a negative cost or a
// unit no policy counts, and Refund's errors.
func (l *Limiter) Settle(ctx context.Context, key, unit string, reserved, cost int64, took Result) error {
	u := slices.Index(l.units, unit)
	switch {
	case u < 0:
		return fmt.Errorf("ratelimit: Settle: no policy counts the unit %q (the units: %q)", unit, l.units)
	case cost < 0:
		return fmt.Errorf("ratelimit: Settle: negative cost %d of %s", cost, unit)
	}
	return l.adjust(ctx, "Settle", &round{key: key, cost: reserved}, took, 1<<u, max(cost, 1))
}

// adjust makes cost the cost of took, which reserved what rd says, under
// the policies whose units are in the set units (bit u: l.units[u]): each
// gives back what it reserved above cost, or takes the rest past empty. A
// cost of 0 gives back all: the request did not count.
func (l *Limiter) adjust(ctx context.Context, op string, rd *round, took Result, units uint64, cost int64) error {
	results, err := l.spent(op, rd.key, took, true)
	if err != nil {
		return err
	}
	rs, _ := l.store.(RefundStore)
	var first error
	for i, r := range results {
		if units&(1<<l.unitOf[i]) == 0 || !r.Allowed {
			continue
		}
		switch reserved := rd.costOf(l, i); {
		case cost < reserved && rs != nil:
			err = l.giveBack(ctx, rs, []int{i}, &round{key: rd.key, cost: reserved - cost, results: results})
		case cost > reserved:
			err = l.charge(ctx, i, rd.key, cost-reserved, r)
		}
		if err != nil && first == nil {
			first = storeError(err)
		}
	}
	return first
}

// spent returns the results of took, for a Refund or Charge (op) of key:
// one per policy, nil when took spent nothing (or, unless degraded, was
// decided while the store failed), or an error, such as for one policy's
// result of a Limiter of several.
func (l *Limiter) spent(op, key string, took Result, degraded bool) ([]Result, error) {
	if key == "" {
		return nil, errEmptyKey
	}
	if !took.Allowed || took.Degraded && !degraded {
		return nil, nil
	}
	if l.owner(took) < 0 {
		name := "none"
		if took.Policy != nil {
			name = strconv.Quote(took.Policy.Name)
		}
		return nil, fmt.Errorf("ratelimit: %s: the Result is not of this Limiter's Take (its policy: %s)", op, name)
	}
	switch {
	case took.Results == nil && len(l.policies) == 1:
		return []Result{took}, nil
	case len(took.Results) == len(l.policies):
		return took.Results, nil
	}
	return nil, fmt.Errorf("ratelimit: %s: the Result is policy %q's alone; pass the Result Take returned, which holds each of the %d policies'", op, took.Policy.Name, len(l.policies))
}

// index returns the index of the policy among l's that p is, or a copy of
// with a key's limit (Policy.LimitFor), or -1 when there is none.
func (l *Limiter) index(p *Policy) int {
	for i := range l.policies {
		if &l.policies[i] == p {
			return i
		}
	}
	for i := range l.keyLimits {
		if l.owns(i, p) {
			return i
		}
	}
	return -1
}

// owner returns the index of the policy that decided r: r.Policy's, or for
// a fallback's local decision (Result.Local), whose Policy is a share of
// one of the Limiter's, that of the policy of its name; -1 when none.
func (l *Limiter) owner(r Result) int {
	if i := l.index(r.Policy); i >= 0 || !r.Local || r.Policy == nil {
		return i
	}
	return slices.Index(l.names, r.Policy.Name)
}

// combine makes the Result of a request decided by several policies: the
// binding policy's result, the lists, and every policy's result.
func (l *Limiter) combine(results []Result, allowed bool) Result {
	var delay time.Duration
	for _, i := range l.enforce {
		delay = max(delay, results[i].Delay)
	}
	idx := l.enforce
	if len(idx) == 0 {
		idx = l.dryRun
	}
	res := results[binding(results, idx)]
	res.Allowed = allowed
	res.Delay = 0
	if allowed {
		res.RetryAfter, res.Delay = 0, delay
	}
	res.Results = results
	return res
}

// binding returns the index, among idx, of the result that binds (see
// bindsOver), the first of equals.
func binding(results []Result, idx []int) int {
	best := idx[0]
	for _, i := range idx[1:] {
		if results[i].bindsOver(results[best]) {
			best = i
		}
	}
	return best
}

// mixes returns the pairs of a policy of l and one of o, in the same store,
// that have one name and different limits: their buckets mix.
func (l *Limiter) mixes(o *Limiter) (pairs [][2]Policy) {
	if !sameStore(l.store, o.store) {
		return nil
	}
	for _, p := range l.policies {
		for _, q := range o.policies {
			if p.Name == q.Name && p.Limit.differs(q.Limit) {
				pairs = append(pairs, [2]Policy{p, q})
			}
		}
	}
	return pairs
}

// differs reports whether buckets of l and m under one name would mix: a
// different interval or burst, or for a quota a different period or zone
// (a zone by its name: one loaded twice is one zone).
func (l Limit) differs(m Limit) bool {
	return l.interval != m.interval || l.burst != m.burst || l.cal != m.cal ||
		l.cal != rate && l.loc.String() != m.loc.String()
}

// sameStore reports whether a and b are one store; stores of a dynamic
// type that cannot be compared, such as a func adapter, are never one.
func sameStore(a, b Store) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}
