package ratelimit

import (
	"context"
	"errors"
	"fmt"
)

// ResetStore is a Store that can forget a bucket, so that [Limiter.Reset]
// can give a client its full quota back; without it, Limiter.Reset fails.
type ResetStore interface {
	Store
	// Reset forgets key's bucket under p, and only it, even while other
	// calls decide: the next request finds it full. It fails only when it
	// cannot tell the bucket is forgotten; one it does not hold is no error.
	Reset(ctx context.Context, p *Policy, key string) error
}

// Reset forgets key (as the KeyFunc returns it) under each policy, dry-run
// ones and penalty boxes included, so that its next request finds every
// bucket full; Global buckets and in-flight slots are left alone. Its
// errors wrap ErrMissingKey (empty key), errors.ErrUnsupported (a store
// that is no [ResetStore]) or ErrStore. docs/policies.md#reset says more.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if key == "" {
		return errEmptyKey
	}
	rs, ok := l.store.(ResetStore)
	if !ok {
		return fmt.Errorf("ratelimit: Reset: the store, a %T, cannot forget a key (%w): it does not implement ResetStore", l.store, errors.ErrUnsupported)
	}
	var errs []error
	reset := func(p *Policy) {
		if err := rs.Reset(ctx, p, key); err != nil {
			errs = append(errs, fmt.Errorf("policy %q: %w", p.Name, err))
		}
	}
	for i := range l.policies {
		if !l.policies[i].Global {
			reset(&l.policies[i])
		}
	}
	for _, b := range l.boxes {
		for _, p := range []*Policy{b.strikes, b.bans, &b.ban} {
			if p != nil {
				reset(p)
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	err := errors.Join(errs...)
	// A failover's "failing closed" wraps ErrStore already; a store it wraps
	// that cannot forget a key has not failed.
	if errors.Is(err, ErrStore) || errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("ratelimit: Reset: %w", err)
	}
	return fmt.Errorf("%w: Reset: %w", ErrStore, err)
}
