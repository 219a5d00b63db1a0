package ratelimit

import (
	"fmt"

	"github.com/tokenfair/ratelimit/internal/clientkey"
)

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

// owns reports whether q decides for policy i: the policy itself, or a
// copy of it that policyFor made.
func (l *Limiter) owns(i int, q *Policy) bool {
	p := &l.policies[i]
	if q == p {
		return true
	}
	if p.LimitFor == nil || q == nil || q.Name != p.Name {
		return false
	}
	c := &l.keyLimits[i]
	kept, ok := c.get(q.Limit)
	return ok && kept == q || c.full(maxKeyLimits)
}
