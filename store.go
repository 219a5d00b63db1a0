package ratelimit

import (
	"context"
	"errors"
	"time"
)

// Store keeps the state of every bucket and decides atomically: two
// concurrent calls for the same policy and key must behave as if one ran
// entirely before the other. Implementations must be safe for concurrent
// use.
//
// A bucket's whole state is one int64, and [Policy.Decide] is the
// algorithm, so a store on any database is a read-modify-write made atomic
// by that database (a transaction, a compare-and-swap, a script):
//
//	state := load(p.Name, key)                   // 0 if absent
//	res, next := p.Decide(state, now, cost)      // now in Unix nanoseconds
//	if next > now { save(p.Name, key, next, next-now) } else { remove(p.Name, key) }
//
// State is namespaced by policy name: the same key under two names is two
// buckets. A [Limiter] validates its policies and the cost before it calls
// a store, so a store may assume that p is valid, the key is not empty and
// 0 ≤ cost ≤ the burst. Tokens are given back through [RefundStore].
//
// A Limiter with a [Penalty] keeps, in the same store, buckets under
// policies of its own whose Algorithm is none of the three exported ones:
// its strikes and bans back-off (Algorithm 4, decided as TokenBucket is)
// and its ban (Algorithm 3). A store decides them with Policy.Decide like
// any other, and at the store each time: no lease, no local answer ahead
// of the store.
//
// This package's Store example is a complete store over a map, and the
// storetest package is the conformance suite every store should pass.
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
// its requests in one atomic step. A Limiter then decides them one at a
// time; Take never returns it.
var ErrNotAtomic = errors.New("ratelimit: requests cannot be decided atomically")

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
	TakeAll(ctx context.Context, reqs []BatchItem, results []Result) error
}

// RefundStore is a Store that can give back tokens that a request spent
// but turned out not to use: a [Limiter] gives back through it what a
// request refused by another policy spent (without a [BatchStore]) and
// what a request that does not count spent (MiddlewareOptions.CountIf). With a store
// that lacks it nothing is given back, which never admits more than the
// limit.
//
// A give-back credits only what its take still costs the bucket, so that
// the requests that count are always a sequence one exact bucket admits
// (docs/algorithms.md). For that a store keeps beside a bucket's state its
// credit, the span given back to it, and the span given back per take; a
// take's Result has Until = next + credit, and a give-back of it moves the
// state by [Policy.Refund] with end = Until − credit + (the span given back
// since of requests taken after it, whose Until is larger; counting less
// of it is safe). The credit grows by what is given back, shrinks by the
// time the bucket spends full, and a store may forget a bucket once state
// + credit ≤ now. A reset makes the bucket full and adds what it owed to
// its credit. The memory and Redis stores do all of it; ExampleStore shows
// how.
type RefundStore interface {
	Store
	// Refund gives back to key's bucket under p the cost tokens that took,
	// an allowed Result of this store's Take for them, spent, atomically
	// with the store's decisions. It returns an error only when the store
	// cannot tell whether the tokens went back.
	Refund(ctx context.Context, p *Policy, key string, cost int64, took Result) error
}

// SlotStore keeps in-flight slots that several instances share, so that
// MiddlewareOptions.MaxInFlight holds across them (redisstore has one). A slot is a
// lease, which the Middleware renews every third of MiddlewareOptions.SlotLease
// while its request runs: if the instance holding it dies, the slot frees
// itself when the lease ends. A Middleware's keys are its MiddlewareOptions.SlotName,
// for the slots of MaxInFlightTotal, and SlotName + ":" + the request's
// key. Implementations must be safe for concurrent use.
type SlotStore interface {
	// Acquire takes one of the limit slots of key for token, until lease
	// has passed, and reports whether it did; when token already holds a
	// slot of key, Acquire extends its lease to lease from now.
	Acquire(ctx context.Context, key, token string, limit int64, lease time.Duration) (ok bool, err error)
	// Release gives back the slot of key that token holds.
	Release(ctx context.Context, key, token string) error
}
