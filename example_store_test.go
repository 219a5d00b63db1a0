package ratelimit_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/tokenfair/ratelimit"
)

// mapStore is a complete [ratelimit.Store]: one int64 of state per bucket,
// in a map, and a mutex that makes each decision atomic. A store on
// Postgres or DynamoDB has the same shape, with a transaction (or a
// conditional write) in place of the mutex and a row in place of the map
// entry.
type mapStore struct {
	now func() time.Time // the clock, injected so that tests control time

	mu      sync.Mutex
	buckets map[string]bucket // an absent bucket is full
}

// bucket is what the store keeps of one bucket: its state, and its credit
// (Policy.Refund), the span given back to it.
type bucket struct{ state, credit int64 }

var (
	_ ratelimit.ResetStore  = (*mapStore)(nil)
	_ ratelimit.RefundStore = (*mapStore)(nil)
)

func newMapStore(now func() time.Time) *mapStore {
	return &mapStore{now: now, buckets: make(map[string]bucket)}
}

// Take reads the bucket's state, lets the policy decide, and writes the
// state back, all under one lock. A store that does I/O passes ctx on to it.
func (s *mapStore) Take(_ context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	key = bucketKey(p.Name, key)

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixNano()
	b := s.buckets[key]
	res, next := p.Decide(b.state, now, cost)
	res.Until = next + b.credit // what Refund needs
	s.save(key, bucket{next, b.credit}, now)
	return res, nil
}

// save keeps b as the bucket of key, until its state plus its credit has
// passed: a database would expire it then.
func (s *mapStore) save(key string, b bucket, now int64) {
	if b.state+b.credit > now {
		s.buckets[key] = b
	} else {
		delete(s.buckets, key) // the bucket is full and owes no credit: it carries no information
	}
}

// Reset makes a bucket full, so that Limiter.Reset can give a client its
// quota back: the optional ratelimit.ResetStore. What the bucket owed
// becomes credit, so that a give-back of a take made before the reset
// credits nothing.
func (s *mapStore) Reset(_ context.Context, p *ratelimit.Policy, key string) error {
	key = bucketKey(p.Name, key)

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixNano()
	b := s.buckets[key]
	b.state, b.credit = p.Refund(b.state, b.credit, now, 0, 0) // a full bucket's credit shrinks
	s.save(key, bucket{now, b.credit + max(b.state-now, 0)}, now)
	return nil
}

// Refund gives back what a take still costs the bucket, so that requests
// that do not count (Options.CountIf) or that another policy refused cost
// nothing: the optional ratelimit.RefundStore. Policy.Refund is the rule.
func (s *mapStore) Refund(_ context.Context, p *ratelimit.Policy, key string, cost int64, took ratelimit.Result) error {
	key = bucketKey(p.Name, key)

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixNano()
	b := s.buckets[key]
	b.state, b.credit = p.Refund(b.state, b.credit, now, cost, took.Until)
	s.save(key, b, now)
	return nil
}

// bucketKey names the bucket of key under a policy. Policy names never
// contain ':', and the key's length comes before it, so no two pairs share
// a bucket: ("a", "b:c") is "a:3:b:c", and ("a:b", "c") is invalid.
func bucketKey(policy, key string) string {
	return policy + ":" + strconv.Itoa(len(key)) + ":" + key
}

func ExampleStore() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store := newMapStore(func() time.Time { return now })
	limiter, err := ratelimit.New(store, ratelimit.Policy{Name: "api", Limit: ratelimit.PerSecond(2)})
	if err != nil {
		panic(err)
	}
	take := func(cost int64) {
		res, err := limiter.Take(context.Background(), "alice", cost)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry-after=%v buckets=%d\n",
			res.Allowed, res.Remaining, res.RetryAfter, len(store.buckets))
	}

	take(1)
	take(1)
	take(1) // the bucket is empty: refused
	now = now.Add(500 * time.Millisecond)
	take(1) // one token earned
	now = now.Add(time.Second)
	take(0) // a cost of 0 only looks: the bucket is full, and forgotten
	// Output:
	// allowed=true remaining=1 retry-after=0s buckets=1
	// allowed=true remaining=0 retry-after=0s buckets=1
	// allowed=false remaining=0 retry-after=500ms buckets=1
	// allowed=true remaining=0 retry-after=0s buckets=1
	// allowed=true remaining=2 retry-after=0s buckets=0
}
