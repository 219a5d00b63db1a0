package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tokenfair/ratelimit/internal/clientkey"
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
	single   *Policy  // the only policy, if it is enforced and has no LimitFor; else nil
	boxes    []*box   // the policies' penalty boxes

	keyLimits []keyLimits // of each policy, when one has LimitFor; else nil
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

// Take spends cost tokens from key's bucket under every policy if each
// holds them. A cost of 0 reports the state without spending. It returns
// an error wrapping ErrMissingKey for an empty key, ErrBadRequest for a
// negative cost or one that an enforcing policy could never allow, and
// ErrStore when the store fails.
func (l *Limiter) Take(ctx context.Context, key string, cost int64) (res Result, err error) {
	p := l.single
	if p == nil || key == "" || cost < 0 || cost > p.Limit.burst {
		return l.takeChecked(ctx, key, cost)
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

// takeChecked is Take for a Limiter of several policies, or of one that
// is dry-run or has LimitFor, and for a key or cost that Take cannot
// decide.
func (l *Limiter) takeChecked(ctx context.Context, key string, cost int64) (Result, error) {
	if key == "" {
		return Result{}, errEmptyKey
	}
	if len(l.policies) == 1 && len(l.enforce) == 1 && l.boxes == nil {
		// One policy, with LimitFor: without the lists of several.
		p, err := l.policyFor(0, key)
		if err == nil {
			err = checkCost(p, cost)
		}
		if err != nil {
			return Result{}, err
		}
		res, err := l.take(ctx, p, key, cost)
		if err != nil {
			return Result{}, storeError(err)
		}
		return res, nil
	}
	results := make([]Result, len(l.policies))
	for i := range l.policies {
		p, err := l.policyFor(i, key)
		if err != nil {
			return Result{}, err
		}
		results[i].Policy = p
	}
	for _, i := range l.enforce {
		if err := checkCost(results[i].Policy, cost); err != nil {
			return Result{}, err
		}
	}
	return l.takeMany(ctx, key, cost, results)
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
		return &clientkey.Error{
			Err:    fmt.Errorf("%w: %w: cost %d, policy %q has burst %d", ErrBadRequest, errCostExceedsBurst, cost, p.Name, p.Limit.burst),
			Kind:   clientkey.KindCostAboveBurst,
			Detail: fmt.Sprintf("the request's cost, %d, is above the burst of policy %q, %d", cost, p.Name, p.Limit.burst),
		}
	}
	return nil
}

// errEmptyKey is the refusal of an empty key.
var errEmptyKey = &clientkey.Error{Err: fmt.Errorf("%w: empty key", ErrMissingKey),
	Kind: clientkey.KindEmptyKey, Detail: "the key is empty"}

// takeMany is Take for a Limiter of several policies, or only dry-run ones,
// with the policy that decides key under each in results.
func (l *Limiter) takeMany(ctx context.Context, key string, cost int64, results []Result) (Result, error) {
	var allowed bool
	var err error
	if l.boxes == nil {
		allowed, err = l.takeAll(ctx, l.enforce, key, cost, results)
	} else {
		var ban Result
		var banned bool
		if allowed, ban, banned, err = l.takeBoxed(ctx, key, cost, results); banned && err == nil {
			return ban, nil
		}
	}
	if err != nil {
		return Result{}, storeError(err)
	}
	for _, i := range l.dryRun {
		p := results[i].Policy
		c := cost
		if !allowed || cost > p.Limit.burst {
			c = 0 // the request does not happen, or could never pass: only look
		}
		res, err := l.take(ctx, p, key, c)
		if err != nil {
			// A dry-run policy never refuses, not even when its store fails.
			results[i] = Result{Allowed: true, Policy: p, Degraded: true}
			continue
		}
		if c != cost {
			res.Allowed, res.RetryAfter = p.wouldAllow(res, cost) // a look: would the cost have fit?
		}
		results[i] = res
	}
	return l.combine(results, allowed), nil
}

// takeAll takes cost from key under the policies at idx, all or nothing,
// and writes their results over those that hold their policies.
func (l *Limiter) takeAll(ctx context.Context, idx []int, key string, cost int64, results []Result) (bool, error) {
	if bs, ok := l.store.(BatchStore); ok && len(idx) > 1 {
		all, _, err := l.batch(ctx, bs, idx, key, cost, results, nil)
		if !errors.Is(err, ErrNotAtomic) {
			return all, err
		}
	}
	all := true
	for k, i := range idx {
		res, err := l.take(ctx, results[i].Policy, key, cost)
		if err != nil {
			l.giveBackAll(ctx, idx[:k], key, cost, results)
			return false, err
		}
		results[i] = res
		all = all && res.Allowed
	}
	if !all {
		l.giveBackAll(ctx, idx, key, cost, results)
	}
	return all, nil
}

// batch decides, in one TakeAll of bs (all or nothing), cost for key under
// the policies at idx and the requests of extra. It writes the policies'
// results, reports whether they all allowed, and returns extra's results,
// whose refusals are the caller's to read. It returns bs's error, such as
// ErrNotAtomic, having decided nothing.
func (l *Limiter) batch(ctx context.Context, bs BatchStore, idx []int, key string, cost int64, results []Result, extra []BatchItem) (bool, []Result, error) {
	reqs := make([]BatchItem, len(idx), len(idx)+len(extra))
	for k, i := range idx {
		p := results[i].Policy
		reqs[k] = BatchItem{Policy: p, Key: bucketKey(p, key), Cost: cost}
	}
	reqs = append(reqs, extra...)
	out := make([]Result, len(reqs))
	if err := bs.TakeAll(ctx, reqs, out); err != nil {
		return false, nil, err
	}
	all := true
	for k, i := range idx {
		if out[k].Policy == nil {
			out[k].Policy = results[i].Policy
		}
		results[i] = out[k]
		all = all && out[k].Allowed
	}
	return all, out[len(idx):], nil
}

// giveBackSome gives back cost to the policies at idx whose results
// allowed it, through rs. A failure to give back only leaves a bucket
// emptier than it should be (never fuller); the first is returned.
func (l *Limiter) giveBackSome(ctx context.Context, rs RefundStore, idx []int, key string, cost int64, results []Result) error {
	var first error
	for _, i := range idx {
		if r := results[i]; r.Allowed && !r.Degraded && cost <= r.Policy.Limit.burst {
			if err := rs.Refund(ctx, r.Policy, bucketKey(r.Policy, key), cost, r); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// giveBackAll gives back, regardless of ctx's cancellation, what the
// allowed results among idx spent: a request refused by another policy.
func (l *Limiter) giveBackAll(ctx context.Context, idx []int, key string, cost int64, results []Result) {
	if rs, ok := l.store.(RefundStore); ok && cost > 0 {
		_ = l.giveBackSome(context.WithoutCancel(ctx), rs, idx, key, cost, results)
	}
}

// Refund gives back cost tokens of took, an allowed Result of this
// Limiter's Take for key, as x/time/rate's Reservation.Cancel does. The
// Refunds of one took must add up to at most what it spent, under the key
// Take was given: the Result cannot tell. It does nothing for cost ≤ 0, a
// refused or degraded took, or a store that is no [RefundStore]; its
// errors wrap ErrMissingKey (empty key) or ErrStore, or name the policy of
// a took of another Limiter.
func (l *Limiter) Refund(ctx context.Context, key string, cost int64, took Result) error {
	results, err := l.spent("Refund", key, took, false)
	rs, ok := l.store.(RefundStore)
	if err != nil || !ok || cost <= 0 || results == nil {
		return err
	}
	if err := l.giveBackSome(ctx, rs, l.all, key, cost, results); err != nil {
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
		if !r.Allowed {
			continue
		}
		p, err := l.policyFor(i, key)
		if err != nil {
			p = r.Policy // the limit it was taken under
		}
		q := *p
		q.Algorithm = debt
		if _, err := l.take(ctx, &q, key, cost); err != nil {
			return storeError(err)
		}
	}
	return nil
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
	if l.index(took.Policy) < 0 {
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
