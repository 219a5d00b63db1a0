package ratelimit

import (
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/tokenfair/ratelimit/internal/clientkey"
)

// keyLimits holds, for a policy with LimitFor, a copy of the policy for each
// limit LimitFor gave, made once and shared in a map copied on write: a
// key's decision goes to the store with the copy of its limit, and finding
// it takes no lock and allocates nothing.
type keyLimits struct {
	mu       sync.Mutex // held to add
	policies atomic.Pointer[map[Limit]*Policy]
}

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
	if m := c.policies.Load(); m != nil {
		if q := (*m)[lim]; q != nil {
			return q, nil
		}
	}
	if err := p.checkLimit(lim); err != nil {
		return nil, &clientkey.Error{Err: fmt.Errorf("ratelimit: policy %q: %w", p.Name, err), Kind: clientkey.KindLimitFor}
	}
	q := new(Policy)
	*q = *p
	q.Limit = lim
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.policies.Load()
	if old != nil {
		if prev := (*old)[lim]; prev != nil {
			return prev, nil
		}
		if len(*old) >= maxKeyLimits {
			return q, nil
		}
	}
	m := make(map[Limit]*Policy, 1)
	if old != nil {
		maps.Copy(m, *old)
	}
	m[lim] = q
	c.policies.Store(&m)
	return q, nil
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
	m := l.keyLimits[i].policies.Load()
	return m != nil && ((*m)[q.Limit] == q || len(*m) >= maxKeyLimits)
}
