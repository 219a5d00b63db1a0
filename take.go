package ratelimit

// The take path: how a Limiter decides a request under its policies, its
// penalty boxes included, and the store calls that later give back
// (giveBack) or charge past empty (charge) what a decision spent.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/tokenfair/ratelimit/internal/clientkey"
)

// Take spends cost from key's bucket under every policy, whatever its
// Unit, if each holds it. A cost of 0 reports the state without spending.
// It returns an error wrapping ErrMissingKey for an empty key,
// ErrBadRequest for a negative cost or one that an enforcing policy could
// never allow, and ErrStore when the store fails.
func (l *Limiter) Take(ctx context.Context, key string, cost int64) (res Result, err error) {
	if p := l.single; p != nil && key != "" && cost >= 0 && cost <= p.Limit.burst {
		// l.ask(ctx, p, key, cost), by hand: the call would not be inlined.
		if res, err = l.store.Take(ctx, p, bucketKey(p, key), cost); err != nil {
			return Result{}, storeError(err)
		}
		if res.Policy == nil {
			res.Policy = p
		}
		return res, nil
	}
	return l.decideRound(ctx, &round{key: key, cost: cost})
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
	return l.decideRound(ctx, &round{key: key, costs: byUnit})
}

// round is one request's decision under a Limiter's policies: its key,
// what each policy is to spend, and, once decided, each one's result (an
// allowed one spent its policy's cost) and the refusal of a ban, if the
// key is banned.
type round struct {
	key     string
	cost    int64   // every policy's cost, without costs
	costs   []int64 // the cost in each unit (Limiter.units), or nil
	results []Result
	ban     Result // a penalty box's refusal (a ban in force, or begun by this round), or none: no Policy
}

// costOf returns what policy i of l spends in rd.
func (rd *round) costOf(l *Limiter, i int) int64 {
	if rd.costs == nil {
		return rd.cost
	}
	return rd.costs[l.unitOf[i]]
}

// decideRound is Take for a Limiter of several policies, or of one that is
// dry-run or has LimitFor, for a key or cost that Take cannot decide, and
// for costs by unit.
func (l *Limiter) decideRound(ctx context.Context, rd *round) (Result, error) {
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
		res, err := l.ask(ctx, p, rd.key, cost)
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
	return l.decidePolicies(ctx, rd)
}

// keyLimits holds, for a policy with LimitFor, a copy of the policy for each
// limit LimitFor gave, made once and shared in a map copied on write: a
// key's decision goes to the store with the copy of its limit, and finding
// it takes no lock and allocates nothing.
type keyLimits = cowMap[Limit, *Policy]

// maxKeyLimits bounds the limits a policy keeps a copy for, in case
// LimitFor gives a different one to every key; past it a decision makes
// its copy again each time: correct, only slower.
const maxKeyLimits = 1024

// policyFor returns the policy that decides key under policy i: the policy
// itself, or its copy with the limit LimitFor gives key. It returns an
// error naming the limit when the policy cannot apply it.
func (l *Limiter) policyFor(i int, key string) (*Policy, error) {
	p := &l.policies[i]
	if p.LimitFor == nil {
		return p, nil
	}
	lim, ok := p.LimitFor(key)
	if !ok || lim == p.Limit {
		return p, nil
	}
	c := &l.keyLimits[i]
	if q, ok := c.get(lim); ok {
		return q, nil
	}
	if err := p.checkLimit(lim); err != nil {
		return nil, &clientkey.Error{Err: fmt.Errorf("ratelimit: policy %q: %w", p.Name, err), Kind: clientkey.KindLimitFor}
	}
	q := new(Policy)
	*q = *p
	q.Limit = lim
	return c.add(lim, q, maxKeyLimits), nil
}

// decidePolicies is Take for a Limiter of several policies, or only dry-run ones,
// with the policy that decides rd's key under each in rd.results.
func (l *Limiter) decidePolicies(ctx context.Context, rd *round) (Result, error) {
	var allowed bool
	var err error
	if l.boxes == nil {
		allowed, err = l.spendAll(ctx, l.enforce, rd)
	} else {
		if allowed, err = l.spendBoxed(ctx, rd); rd.ban.Policy != nil && err == nil {
			return rd.ban, nil
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
		res, err := l.ask(ctx, p, rd.key, c)
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

// spendBoxed is spendAll of the enforcing policies for a Limiter with
// penalty boxes: a banned key is refused (rd.ban), and spends nothing; a
// refusal counts a strike. With a BatchStore, the bans are asked in the
// same atomic step as the policies decide.
func (l *Limiter) spendBoxed(ctx context.Context, rd *round) (allowed bool, err error) {
	allowed, err = l.spendBoxedBatch(ctx, rd)
	if errors.Is(err, errors.ErrUnsupported) {
		if err = l.banned(ctx, rd); err != nil || rd.ban.Policy != nil {
			return false, err
		}
		allowed, err = l.spendAll(ctx, l.enforce, rd)
	}
	if err != nil || rd.ban.Policy != nil || allowed {
		return allowed, err
	}
	l.strike(ctx, rd)
	return false, nil
}

// spendBoxedBatch is spendBoxed in one TakeAll; it returns an error wrapping
// errors.ErrUnsupported when the store cannot.
func (l *Limiter) spendBoxedBatch(ctx context.Context, rd *round) (bool, error) {
	bs, ok := l.store.(BatchStore)
	if !ok {
		return false, errors.ErrUnsupported
	}
	checks := make([]BatchItem, len(l.boxes))
	for k, b := range l.boxes {
		checks[k] = BatchItem{Policy: &b.ban, Key: rd.key}
	}
	allowed, bans, err := l.batch(ctx, bs, l.enforce, rd, checks)
	if err != nil {
		return false, err
	}
	for k, b := range l.boxes {
		if !bans[k].Allowed {
			rd.ban = l.banResult(b, bans[k])
			return false, nil
		}
	}
	return allowed, nil
}

// banned asks the store, for every penalty box, whether rd's key is
// banned, and sets rd.ban to the first ban's refusal.
func (l *Limiter) banned(ctx context.Context, rd *round) error {
	for _, b := range l.boxes {
		res, err := l.store.Take(ctx, &b.ban, rd.key, 0)
		if err != nil {
			return err
		}
		if !res.Allowed {
			rd.ban = l.banResult(b, res)
			return nil
		}
	}
	return nil
}

// strike counts the refusal of rd's key by the policies that refused it,
// and bans the key under those whose strikes ran out. It sets rd.ban to
// the ban's refusal if one began, or to the ban in force if another
// request began it first: of the refusals that race to ban a key, one
// bans it, for the length the bans remembered before it give, and only
// that one is remembered for the back-off. A store failure bans nobody. A
// degraded refusal (a failover's Local mode) strikes as any does, in the
// store that refused.
func (l *Limiter) strike(ctx context.Context, rd *round) {
	ctx, key := context.WithoutCancel(ctx), rd.key
	for _, b := range l.boxes {
		if rd.results[b.policy].Allowed {
			continue
		}
		if b.strikes != nil {
			if res, err := l.store.Take(ctx, b.strikes, key, 1); err != nil || res.Allowed {
				continue
			}
		}
		pen := l.policies[b.policy].Penalty
		length := pen.For
		if b.bans != nil {
			levels := b.bans.Limit.burst - 1 // the doublings from For to Max
			level := levels                  // more bans remembered than levels: the longest
			if res, err := l.store.Take(ctx, b.bans, key, 0); err == nil {
				level = min(levels+1-res.Remaining, levels)
			}
			length = min(pen.For<<level, pen.Max)
		}
		res, err := l.store.Take(ctx, &b.ban, key, int64(length))
		if err != nil {
			continue
		}
		if !res.Allowed { // another refusal banned the key first
			rd.ban = l.banResult(b, res)
			return
		}
		if b.bans != nil {
			_, _ = l.store.Take(ctx, b.bans, key, 1) // a failure forgets this ban (a shorter next one)
		}
		rd.ban = l.banResult(b, Result{RetryAfter: res.ResetAfter, ResetAfter: res.ResetAfter})
		return
	}
}

// banResult is the answer to a request of a banned key: a refusal by the
// punished policy that lasts the rest of the ban, naming the ban, whose
// result, of policy b.ban, is its only one.
func (l *Limiter) banResult(b *box, res Result) Result {
	res.Policy, res.Allowed = &b.ban, false
	return Result{Policy: &l.policies[b.policy], RetryAfter: res.RetryAfter, ResetAfter: res.ResetAfter, Results: []Result{res}}
}

// spendAll takes rd's costs under the policies at idx, all or nothing, and
// writes their results over those that hold their policies.
func (l *Limiter) spendAll(ctx context.Context, idx []int, rd *round) (bool, error) {
	if bs, ok := l.store.(BatchStore); ok && len(idx) > 1 {
		all, _, err := l.batch(ctx, bs, idx, rd, nil)
		if !errors.Is(err, errors.ErrUnsupported) {
			return all, err
		}
	}
	all := true
	for k, i := range idx {
		res, err := l.ask(ctx, rd.results[i].Policy, rd.key, rd.costOf(l, i))
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
// errors.ErrUnsupported, having decided nothing.
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

// ask has the store decide key under p. A Result a store built without
// its Policy gets the one it was asked about.
func (l *Limiter) ask(ctx context.Context, p *Policy, key string, cost int64) (res Result, err error) {
	if res, err = l.store.Take(ctx, p, bucketKey(p, key), cost); err == nil && res.Policy == nil {
		res.Policy = p
	}
	return res, err
}

// bucketKey returns the key of the bucket of key under p.
func bucketKey(p *Policy, key string) string {
	if p.Global {
		return globalKey
	}
	return key
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

// giveBackAll gives back, regardless of ctx's cancellation, what the
// allowed results of rd among idx spent: a request refused by another
// policy.
func (l *Limiter) giveBackAll(ctx context.Context, idx []int, rd *round) {
	if rs, ok := l.store.(RefundStore); ok {
		_ = l.giveBack(context.WithoutCancel(ctx), rs, idx, rd)
	}
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

// charge takes cost past empty from key's bucket under policy i, which
// allowed took, under the key's limit in force.
func (l *Limiter) charge(ctx context.Context, i int, key string, cost int64, took Result) error {
	p, err := l.policyFor(i, key)
	if err != nil {
		p = took.Policy // the limit it was taken under
	}
	q := *p
	q.Algorithm = debt
	if _, err := l.ask(ctx, &q, key, cost); err != nil {
		return storeError(err)
	}
	return nil
}
