package ratelimit

import (
	"context"
	"errors"
	"fmt"
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
}

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

// Result is the outcome of one decision.
type Result struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
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
	// (shaping algorithms); 0 otherwise.
	Delay time.Duration
	// Degraded reports that the store failed and a [Failover] decided
	// instead: unchecked (FailOpen) or by its local fallback (FailLocal).
	// The middleware writes no rate-limit header fields for such a result.
	Degraded bool
}

// Errors returned by [Limiter.Take]. Store failures are wrapped with
// ErrStore, so errors.Is(err, ErrStore) tells them from bad requests.
var (
	ErrEmptyKey         = errors.New("ratelimit: empty key")
	ErrNegativeCost     = errors.New("ratelimit: negative cost")
	ErrCostExceedsBurst = errors.New("ratelimit: cost exceeds burst")
	ErrStore            = errors.New("ratelimit: store failed")
)

// Limiter applies one policy to keys, keeping their state in a store. It is
// safe for concurrent use.
type Limiter struct {
	store  Store
	policy Policy
}

// New returns a Limiter that enforces p with state kept in store. It returns
// an error if store is nil or p is invalid.
func New(store Store, p Policy) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("ratelimit: nil store")
	}
	p, err := p.validate()
	if err != nil {
		return nil, err
	}
	return &Limiter{store: store, policy: p}, nil
}

// Policy returns the limiter's policy, with defaults filled in.
func (l *Limiter) Policy() Policy { return l.policy }

// Take spends cost tokens from key's bucket if it holds them. A cost of 0
// reports the state without spending. It returns ErrEmptyKey,
// ErrNegativeCost or ErrCostExceedsBurst (a cost that could never pass) for
// bad input, and an error wrapping ErrStore when the store fails.
func (l *Limiter) Take(ctx context.Context, key string, cost int64) (Result, error) {
	switch {
	case key == "":
		return Result{}, ErrEmptyKey
	case cost < 0:
		return Result{}, ErrNegativeCost
	case cost > l.policy.Limit.Burst:
		return Result{}, fmt.Errorf("%w: cost %d, policy %q has burst %d", ErrCostExceedsBurst, cost, l.policy.Name, l.policy.Limit.Burst)
	}
	res, err := l.store.Take(ctx, l.policy, key, cost)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrStore, err)
	}
	return res, nil
}
