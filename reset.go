package ratelimit

import (
	"context"
	"errors"
	"fmt"
)

// ResetStore is a Store that can forget a bucket, so that [Limiter.Reset]
// can give a client its full quota back. memorystore, redisstore and
// failover have it; a store without it makes Limiter.Reset fail.
type ResetStore interface {
	Store
	// Reset forgets the state of key's bucket under p: the next request
	// finds it full, as a new key's. Forgetting a bucket that the store
	// does not hold is not an error. It must not change any other bucket,
	// even one that concurrent calls are deciding, and p must not be
	// modified. It returns an error only when the store cannot tell that
	// the bucket is forgotten.
	Reset(ctx context.Context, p *Policy, key string) error
}

// Reset forgets the state of key under each of the limiter's policies, so
// that its next request finds every bucket full, as a new client's; dry-run
// policies included. It leaves alone the buckets of Global policies, which
// every client shares: resetting one client must not hand the others a
// full shared bucket. In-flight slots (MiddlewareOptions.MaxInFlight) are not rate
// state either, and stay taken until their requests end.
//
// The key is the one the limiter decides on, as the KeyFunc returns it (an
// API key's hash from [KeyByAPIKey], "ip:" and the address from
// [KeyByIP]). A request in flight during Reset may still spend from the
// bucket after it.
//
// Reset returns an error wrapping ErrMissingKey for an empty key, an error
// wrapping [errors.ErrUnsupported] and naming the store's type when the
// store (or one a failover store wraps) cannot forget a key, and an error
// wrapping ErrStore when the store fails; after a failure it still tries
// the other policies. A penalty box's strikes and bans (Policy.Penalty) are
// forgotten with their policy.
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
