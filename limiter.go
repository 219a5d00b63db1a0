package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// Algorithm selects how a [Policy] turns its [Limit] into decisions.
type Algorithm uint8

const (
	// TokenBucket allows bursts up to Limit.Burst and refills continuously,
	// one token every Limit.Interval. A new key starts with a full bucket. It
	// is implemented as GCRA: one int64 of state per key.
	TokenBucket Algorithm = iota
	// LeakyPolice is the leaky bucket as a meter: water leaks at one unit
	// every Limit.Interval from a bucket of Limit.Burst units, a request
	// pours in its cost, and a request that would overflow is refused at once.
	// With the level L = max(E − now, 0) / interval, where E is the time the
	// bucket would be empty, a request is allowed iff L + cost ≤ burst, that
	// is max(E, now) + cost × interval − now ≤ burst × interval: the token
	// bucket's test with E in the place of its TAT. The decisions are the
	// same as TokenBucket's; choose the name that says what you mean.
	LeakyPolice
	// LeakyShape is the leaky bucket as a queue: each key's requests leave at
	// a constant rate, one unit of cost every Limit.Interval. A request that
	// arrives at t starts at max(t, next), where next is when the queue is
	// empty, and waits the difference (Result.Delay); next then moves on by
	// cost × Interval. A wait above Burst × Interval (the queue's room), or
	// above Policy.MaxDelay, is refused at once. With 5/s and burst 10, twelve
	// requests at once: one runs now, ten wait 0.2 s … 2.0 s, one is refused.
	LeakyShape
)

var algorithmNames = [...]string{TokenBucket: "token-bucket", LeakyPolice: "leaky-police", LeakyShape: "leaky-shape"}

// String returns the algorithm's name as the demo server's -algorithm flag
// spells it, such as "token-bucket".
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm returns the Algorithm whose String is s.
func ParseAlgorithm(s string) (Algorithm, error) {
	for i, name := range algorithmNames {
		if name == s {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("ratelimit: unknown algorithm %q", s)
}

// DefaultPolicyName is the name of a [Policy] whose Name is empty.
const DefaultPolicyName = "default"

// Policy is a named limit enforced by an algorithm. The name appears in
// response headers, problem bodies and store keys, so it must be 1 to 64
// characters from [A-Za-z0-9._-].
type Policy struct {
	// Name identifies the policy. Empty means DefaultPolicyName.
	Name string
	// Limit is the rate and capacity.
	Limit Limit
	// Algorithm is how Limit is applied. The zero value is TokenBucket.
	Algorithm Algorithm
	// Immediate, for LeakyShape only, is how many units of a queue's wait
	// are forgiven: the first Immediate queued requests (of cost 1) proceed
	// at once and only those behind them wait, like nginx's limit_req
	// delay=N. It changes no admission decision. Zero (the default) shapes
	// every queued request; Burst is nginx's nodelay.
	Immediate int64
	// MaxDelay, for LeakyShape only, refuses at once a request that would
	// wait longer than MaxDelay, below the queue's room of Burst × Interval.
	// Zero (the default) means only the queue's room bounds the wait.
	MaxDelay time.Duration
	// Global makes the policy one bucket shared by every request, whatever
	// its key: a capacity limit for the whole service, to combine with
	// per-client policies.
	Global bool
	// DryRun makes the policy decide and count but never refuse: a request
	// it alone would refuse proceeds, and its name is reported in
	// Result.DryRunViolated (for logs and metrics). Roll out a new limit
	// this way before you enforce it. Dry-run policies do not appear in
	// header fields unless the middleware is told to (WithDryRunHeaders).
	DryRun bool
}

// GlobalKey is the key under which a Global policy keeps its one bucket.
const GlobalKey = "*"

func (p Policy) validate() (Policy, error) {
	if p.Name == "" {
		p.Name = DefaultPolicyName
	}
	if !validName(p.Name) {
		return p, fmt.Errorf("ratelimit: invalid policy name %q: want 1 to 64 characters from [A-Za-z0-9._-]", p.Name)
	}
	if int(p.Algorithm) >= len(algorithmNames) {
		return p, fmt.Errorf("ratelimit: policy %q: unknown algorithm %v", p.Name, p.Algorithm)
	}
	if err := p.Limit.Validate(); err != nil {
		return p, fmt.Errorf("policy %q: %w", p.Name, err)
	}
	switch {
	case p.Algorithm != LeakyShape && (p.Immediate != 0 || p.MaxDelay != 0):
		return p, fmt.Errorf("ratelimit: policy %q: Immediate and MaxDelay apply to %v only", p.Name, LeakyShape)
	case p.Immediate < 0 || p.Immediate > p.Limit.Burst:
		return p, fmt.Errorf("ratelimit: policy %q: Immediate %d outside [0, burst %d]", p.Name, p.Immediate, p.Limit.Burst)
	case p.MaxDelay < 0 || p.MaxDelay > p.Limit.Span():
		return p, fmt.Errorf("ratelimit: policy %q: MaxDelay %v outside [0, %v]", p.Name, p.MaxDelay, p.Limit.Span())
	}
	return p, nil
}

func validName(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Result is the outcome of one decision. For a Limiter of several
// policies, its fields describe the binding policy: the refusing policy with
// the longest wait when the request is refused, else the policy closest to
// exhaustion (fewest tokens remaining); Policies has every policy's result.
//
// A Result is kept small (it is returned by value on every request); the
// lists a Limiter adds are behind the methods Violated, DryRunViolated and
// Policies.
type Result struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Degraded reports that the store failed and a [Failover] decided
	// instead: unchecked (FailOpen) or by its local fallback (FailLocal).
	// The middleware writes no rate-limit header fields for such a result.
	Degraded bool
	// Policy is the name of the policy that decided.
	Policy string
	// Limit is the policy's limit; Limit.Burst is the quota advertised in
	// headers.
	Limit Limit
	// Remaining is the number of whole tokens left after the decision, also
	// after a refusal. It is never negative.
	Remaining int64
	// RetryAfter is how long until the same request would be allowed: 0 when
	// allowed, and 0 for a cost that can never be allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the bucket is full again.
	ResetAfter time.Duration
	// Delay is how long an allowed request must wait before it proceeds
	// (shaping algorithms; with several policies the longest wait); 0
	// otherwise.
	Delay time.Duration

	lists *lists // set by a Limiter; nil for a store's result
}

// lists holds what a Limiter adds to a Result.
type lists struct {
	violated, dryRunViolated []string
	policies                 []Result
}

// Violated names the policies that refused the request; nil when it is
// allowed. The slice may be shared: do not modify it.
func (r Result) Violated() []string {
	if r.lists == nil {
		return nil
	}
	return r.lists.violated
}

// DryRunViolated names the dry-run policies that would have refused the
// request. The slice may be shared: do not modify it.
func (r Result) DryRunViolated() []string {
	if r.lists == nil {
		return nil
	}
	return r.lists.dryRunViolated
}

// Policies returns the result of every policy, in the Limiter's order, when
// it has more than one; nil otherwise. The slice may be shared: do not
// modify it.
func (r Result) Policies() []Result {
	if r.lists == nil {
		return nil
	}
	return r.lists.policies
}

// Errors returned by [Limiter.Take]. Store failures are wrapped with
// ErrStore, so errors.Is(err, ErrStore) tells them from bad requests.
var (
	ErrEmptyKey         = errors.New("ratelimit: empty key")
	ErrNegativeCost     = errors.New("ratelimit: negative cost")
	ErrCostExceedsBurst = errors.New("ratelimit: cost exceeds burst")
	ErrStore            = errors.New("ratelimit: store failed")
)

// Limiter applies one or more policies to keys, keeping their state in a
// store. A request passes only if every policy allows it, and a request
// refused by any policy spends nothing from the others: with a
// [BatchStore] all policies are decided in one atomic step; otherwise they
// are taken one at a time and the tokens taken before a refusal are given
// back, so concurrent requests may briefly see them spent but none is ever
// lost or spent twice. A Limiter is safe for concurrent use.
type Limiter struct {
	store    Store
	policies []Policy
	all      []int       // indexes of every policy
	enforce  []int       // indexes of the enforcing policies
	dryRun   []int       // indexes of the dry-run policies
	refused  *lists      // the lists of a refusal by the only policy
	names    []string    // every policy's name
	fields   [2]string   // RateLimit-Policy values: enforcing policies, all policies
	checked  atomic.Bool // checkShared has seen it
}

// New returns a Limiter that enforces policies with state kept in store.
// It returns an error if store is nil, there is no policy, a policy is
// invalid, or two policies share a name.
func New(store Store, policies ...Policy) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("ratelimit: nil store")
	}
	if len(policies) == 0 {
		return nil, errors.New("ratelimit: no policy")
	}
	l := &Limiter{store: store}
	seen := map[string]bool{}
	for i, p := range policies {
		p, err := p.validate()
		if err != nil {
			return nil, err
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("ratelimit: two policies named %q", p.Name)
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
	l.refused = &lists{violated: l.names[:1:1]}
	l.fields = [2]string{policyField(l.policies, false), policyField(l.policies, true)}
	return l, nil
}

// Policies returns the limiter's policies, with defaults filled in.
func (l *Limiter) Policies() []Policy { return slices.Clone(l.policies) }

func (l *Limiter) key(i int, key string) string {
	if l.policies[i].Global {
		return GlobalKey
	}
	return key
}

// Take spends cost tokens from key's bucket under every policy if each
// holds them. A cost of 0 reports the state without spending. It returns
// ErrEmptyKey, ErrNegativeCost or ErrCostExceedsBurst (a cost that an
// enforcing policy could never allow) for bad input, and an error wrapping
// ErrStore when the store fails.
func (l *Limiter) Take(ctx context.Context, key string, cost int64) (Result, error) {
	if err := l.check(key, cost); err != nil {
		return Result{}, err
	}
	if len(l.policies) > 1 || len(l.enforce) == 0 {
		return l.takeMany(ctx, key, cost)
	}
	res, err := l.store.Take(ctx, l.policies[0], l.key(0, key), cost)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrStore, err)
	}
	if !res.Allowed {
		res.lists = l.refused
	}
	return res, nil
}

// check returns the error for a key or cost that Take cannot decide.
func (l *Limiter) check(key string, cost int64) error {
	switch {
	case key == "":
		return ErrEmptyKey
	case cost < 0:
		return ErrNegativeCost
	}
	for _, i := range l.enforce {
		if p := &l.policies[i]; cost > p.Limit.Burst {
			return fmt.Errorf("%w: cost %d, policy %q has burst %d", ErrCostExceedsBurst, cost, p.Name, p.Limit.Burst)
		}
	}
	return nil
}

// takeMany is Take for a Limiter of several policies, or only dry-run ones.
func (l *Limiter) takeMany(ctx context.Context, key string, cost int64) (Result, error) {
	results := make([]Result, len(l.policies))
	allowed, err := l.takeAll(ctx, l.enforce, key, cost, results)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrStore, err)
	}
	for _, i := range l.dryRun {
		p := l.policies[i]
		c := cost
		if !allowed || cost > p.Limit.Burst {
			c = 0 // the request does not happen, or could never pass: only look
		}
		res, err := l.store.Take(ctx, p, l.key(i, key), c)
		if err != nil {
			// A dry-run policy never refuses, not even when its store fails.
			results[i] = Result{Allowed: true, Policy: p.Name, Limit: p.Limit, Degraded: true}
			continue
		}
		if c != cost { // a look: would the cost have fit?
			res.Allowed = cost <= p.Limit.Burst && res.Remaining >= cost
		}
		results[i] = res
	}
	return l.combine(results, allowed), nil
}

// takeAll takes cost from key under the policies at idx, all or nothing,
// and writes their results.
func (l *Limiter) takeAll(ctx context.Context, idx []int, key string, cost int64, results []Result) (bool, error) {
	if bs, ok := l.store.(BatchStore); ok && len(idx) > 1 {
		reqs := make([]Request, len(idx))
		out := make([]Result, len(idx))
		for k, i := range idx {
			reqs[k] = Request{Policy: l.policies[i], Key: l.key(i, key), Cost: cost}
		}
		switch err := bs.TakeAll(ctx, reqs, out); {
		case err == nil:
			all := true
			for k, i := range idx {
				results[i] = out[k]
				all = all && out[k].Allowed
			}
			return all, nil
		case !errors.Is(err, ErrNotAtomic):
			return false, err
		}
	}
	all := true
	for k, i := range idx {
		res, err := l.store.Take(ctx, l.policies[i], l.key(i, key), cost)
		if err != nil {
			l.giveBackSome(ctx, idx[:k], key, cost, results)
			return false, err
		}
		results[i] = res
		all = all && res.Allowed
	}
	if !all {
		l.giveBackSome(ctx, idx, key, cost, results)
	}
	return all, nil
}

// giveBackSome returns the tokens that the allowed results among idx spent.
// It runs even if ctx was canceled, and a failure to give back only leaves
// the bucket emptier than it should be (never fuller).
func (l *Limiter) giveBackSome(ctx context.Context, idx []int, key string, cost int64, results []Result) {
	if cost == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	for _, i := range idx {
		if r := results[i]; r.Allowed && !r.Degraded && cost <= r.Limit.Burst {
			_, _ = l.store.Take(ctx, l.policies[i], l.key(i, key), -cost)
		}
	}
}

// giveBack returns cost to every policy that res says spent it, after the
// request turned out not to count (WithCountIf) or could not run.
func (l *Limiter) giveBack(ctx context.Context, key string, cost int64, res Result) {
	if res.Degraded {
		return
	}
	if res.Policies() == nil {
		l.giveBackSome(ctx, l.all, key, cost, []Result{res})
		return
	}
	l.giveBackSome(ctx, l.all, key, cost, res.Policies())
}

// combine makes the Result of a request decided by several policies: the
// binding policy's result, the lists, and every policy's result.
func (l *Limiter) combine(results []Result, allowed bool) Result {
	var delay time.Duration
	var violated, dry []string
	for _, i := range l.enforce {
		delay = max(delay, results[i].Delay)
		if !results[i].Allowed {
			violated = append(violated, results[i].Policy)
		}
	}
	for _, i := range l.dryRun {
		if !results[i].Allowed {
			dry = append(dry, results[i].Policy)
		}
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
	res.lists = &lists{violated, dry, results}
	return res
}

// binding returns the index, among idx, of the result that binds: a
// refusing one with the longest wait, else the one with the fewest tokens
// left (the first of equals).
func binding(results []Result, idx []int) int {
	best := idx[0]
	for _, i := range idx[1:] {
		r, b := results[i], results[best]
		if !r.Allowed && (b.Allowed || r.RetryAfter > b.RetryAfter) || r.Allowed && b.Allowed && r.Remaining < b.Remaining {
			best = i
		}
	}
	return best
}
