package ratelimit

import (
	"context"
	"errors"
	"time"
)

// Store keeps the state of every bucket, one int64 per policy name and
// key, and decides atomically: two concurrent calls for the same bucket
// behave as if one ran entirely before the other. [Policy.Decide] is the
// algorithm, so a store is a read-modify-write made atomic by its database:
//
//	state := load(p.Name, key)                   // 0 if absent
//	res, next := p.Decide(state, now, cost)      // now in Unix nanoseconds
//	if next > now { save(p.Name, key, next, next-now) } else { remove(p.Name, key) }
//
// A [Limiter] validates first: p is valid, key not empty, 0 ≤ cost ≤ burst.
// Some policies are the Limiter's own, with Algorithms none of the three
// exported (MarshalText gives "strikes", "ban", "debt"): a [Penalty]'s
// buckets, named POLICY/strikes, POLICY/bans and POLICY/ban, and a charge
// past empty ([Limiter.Charge]), a copy of the policy charged, whose cost
// may exceed the burst and be any int64. Decide them with Decide too, and never ahead of
// the store (no lease, no local answer). Implementations must be safe for
// concurrent use; docs/stores.md explains writing one, storetest checks it.
type Store interface {
	// Take decides one request of cost tokens for the bucket of key under
	// p, and spends them if allowed. It returns an error only when the
	// store cannot decide; p is shared and must not be modified.
	Take(ctx context.Context, p *Policy, key string, cost int64) (Result, error)
}

// BatchItem is one of the decisions a [BatchStore] takes together.
type BatchItem struct {
	Policy *Policy // the policy to decide under; shared, not to be modified
	Key    string  // the bucket's key under Policy (never empty)
	Cost   int64   // the tokens to spend; 0 only looks, and never negative
}

// ErrNotAtomic is what [BatchStore.TakeAll] returns when it cannot decide
// its requests in one step; Limiter.Take never returns it.
var ErrNotAtomic = errors.New("ratelimit: requests cannot be decided atomically")

// BatchStore is a Store that can decide several requests at one instant,
// all or nothing, so that a request one policy refuses spends nothing from
// the others at any moment. A [Limiter] of several policies uses it when
// the store has it.
type BatchStore interface {
	Store
	// TakeAll writes each request's result to results[i] as Take would,
	// and spends them all if every one is allowed, else none. It returns
	// ErrNotAtomic, having done nothing, when it cannot decide them in one
	// step (keys on different Redis Cluster slots, say).
	TakeAll(ctx context.Context, reqs []BatchItem, results []Result) error
}

// RefundStore is a Store that can give back tokens a request spent but did
// not use: a refusal by another policy (without a [BatchStore]), or a
// response that does not count (MiddlewareOptions.CountIf). Without it
// nothing is given back, which never admits more than the limit.
// docs/algorithms.md#giving-tokens-back says what a store keeps for it.
type RefundStore interface {
	Store
	// Refund gives back cost of the tokens that took, an allowed Result of
	// this store's Take for key under p, spent, atomically with the
	// store's decisions. It fails only when it cannot tell whether the
	// tokens went back.
	Refund(ctx context.Context, p *Policy, key string, cost int64, took Result) error
}

// SlotStore keeps the in-flight slots of MiddlewareOptions.MaxInFlight for
// several instances (redisstore has one), as leases that the Middleware
// renews while its request runs; its keys are SlotName, and SlotName + ":"
// + the request's key. Implementations must be safe for concurrent use.
type SlotStore interface {
	// Acquire takes one of the limit slots of key for token, until lease
	// has passed, and reports whether it did; when token already holds a
	// slot of key, Acquire extends its lease to lease from now.
	Acquire(ctx context.Context, key, token string, limit int64, lease time.Duration) (ok bool, err error)
	// Release gives back the slot of key that token holds.
	Release(ctx context.Context, key, token string) error
}
