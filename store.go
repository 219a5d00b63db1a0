package ratelimit

import "context"

// Store keeps the state of every bucket and applies an algorithm to it
// atomically: two concurrent calls for the same policy and key must behave as
// if one ran entirely before the other.
//
// State is namespaced by policy name: the same key under two policy names is
// two buckets. A [Limiter] validates its policy and the cost before it calls
// Take, so a store may assume that p is valid, key is not empty and
// 0 ≤ cost ≤ p.Limit.Burst.
//
// Implementations in this module: memorystore (in process). The redisstore
// module shares one quota across many processes. The storetest package is a
// conformance suite that every implementation should pass.
type Store interface {
	// Take spends cost tokens from the bucket of key under policy p if the
	// bucket holds them, and reports the decision. A refused request spends
	// nothing. Take returns an error only when the store cannot decide.
	Take(ctx context.Context, p Policy, key string, cost int64) (Result, error)
}
