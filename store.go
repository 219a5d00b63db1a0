package ratelimit

import (
	"context"
	"time"
)

// Store keeps the state of every bucket, one int64 per policy name and
// key, and decides with [Policy.Decide], atomically: two concurrent calls
// for one bucket behave as if one ran entirely before the other. A
// [Limiter] validates first (p valid, key not empty, 0 ≤ cost ≤ burst). Its
// [Penalty] buckets and charges past empty are policies with Algorithms of
// its own, whose cost may be any int64: decide them with Decide too, never
// ahead of the store (no lease, no local answer). Implementations must be
// safe for concurrent use; docs/stores.md#writing-a-store explains writing
// one, storetest checks it.
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

// BatchStore is a Store that can decide several requests at one instant,
// all or nothing, so that a request one policy refuses never spends from
// the others. A [Limiter] of several policies uses it when it can.
type BatchStore interface {
	Store
	// TakeAll writes each request's result to results[i] as Take would,
	// and spends them all if all are allowed, else none. For a batch it
	// cannot decide in one step (keys on several Cluster slots), it does
	// nothing and returns an error wrapping errors.ErrUnsupported.
	TakeAll(ctx context.Context, reqs []BatchItem, results []Result) error
}

// RefundStore is a Store that can give back tokens a request spent but did
// not use (refused by another policy, or not counted by CountIf); without
// it nothing is given back, which never admits more than the limit.
// docs/algorithms.md#giving-tokens-back says what a store keeps for it.
type RefundStore interface {
	Store
	// Refund gives back, atomically with Take, cost of the tokens spent by
	// took, an allowed Result of this store's Take for key under p. It
	// fails only when it cannot tell whether they went back.
	Refund(ctx context.Context, p *Policy, key string, cost int64, took Result) error
}

// SlotStore keeps the in-flight slots of MiddlewareOptions.MaxInFlight for
// several instances (redisstore has one), as leases renewed while their
// requests run; keys are SlotName and SlotName:KEY. Implementations must be
// safe for concurrent use.
type SlotStore interface {
	// Acquire takes one of key's limit slots for token, for lease, and
	// reports whether it did; a slot token holds is leased anew from now.
	Acquire(ctx context.Context, key, token string, limit int64, lease time.Duration) (ok bool, err error)
	// Release gives back the slot of key that token holds.
	Release(ctx context.Context, key, token string) error
}
