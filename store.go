package ratelimit

import (
	"context"
	"errors"
)

// Store keeps the state of every bucket and applies an algorithm to it
// atomically: two concurrent calls for the same policy and key must behave as
// if one ran entirely before the other.
//
// State is namespaced by policy name: the same key under two policy names is
// two buckets. A [Limiter] validates its policies and the cost before it
// calls a store, so a store may assume that the policy is valid, the key is
// not empty and cost ≤ the policy's burst.
//
// Implementations in this module: memorystore (in process) and [Failover]
// (a wrapper that decides what happens while another store fails). The
// redisstore module shares one quota across many processes. The storetest
// package is a conformance suite that every implementation should pass.
type Store interface {
	// Take spends cost tokens from the bucket of key under policy p if the
	// bucket holds them, and reports the decision. A refused request spends
	// nothing. A negative cost gives back −cost tokens spent earlier and is
	// always allowed. Take returns an error only when the store cannot
	// decide.
	Take(ctx context.Context, p Policy, key string, cost int64) (Result, error)
}

// Request is one of the decisions a [BatchStore] takes together.
type Request struct {
	Policy Policy
	Key    string
	Cost   int64 // not negative
}

// BatchStore is a Store that can decide several requests atomically, all
// or nothing. A [Limiter] with several policies uses it, when the store has
// it, so that a request refused by one policy spends nothing from the
// others without a moment in which it did.
type BatchStore interface {
	Store
	// TakeAll decides every request at one instant and writes each result
	// to results[i] as Take would report it. If every request is allowed it
	// spends all of them; otherwise it spends none. It returns ErrNotAtomic,
	// having done nothing, when it cannot decide these requests in one
	// atomic step (keys on different Redis Cluster slots, for instance); the
	// Limiter then takes them one at a time and gives back what a refusal
	// left spent.
	TakeAll(ctx context.Context, reqs []Request, results []Result) error
}

// ErrNotAtomic is returned by [BatchStore.TakeAll] when it cannot decide the
// requests atomically.
var ErrNotAtomic = errors.New("ratelimit: requests cannot be decided atomically")
