package ratelimit_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/tokenfair/ratelimit"
)

// mapStore is a complete [ratelimit.Store]: the state of each bucket in a
// map, and a mutex that makes each decision atomic. A store on Postgres or
// DynamoDB has the same shape, with a transaction (or a conditional write)
// in place of the mutex and a row in place of the map entry.
type mapStore struct {
	now func() time.Time // the clock, injected so that tests control time

	mu      sync.Mutex
	buckets map[string]mapBucket // an absent bucket is full
}

// mapBucket is what the store keeps of one bucket: its state, and its
// credit (ratelimit.RefundStore), the span given back to it.
type mapBucket struct{ state, credit int64 }

var (
	_ ratelimit.BatchStore  = (*mapStore)(nil)
	_ ratelimit.ResetStore  = (*mapStore)(nil)
	_ ratelimit.RefundStore = (*mapStore)(nil)
)

func newMapStore(now func() time.Time) *mapStore {
	return &mapStore{now: now, buckets: make(map[string]mapBucket)}
}

// Take is a batch of one: it reads the bucket's state, lets the policy
// decide, and writes the state back, all under one lock. A store that does
// I/O passes ctx on to it.
func (s *mapStore) Take(ctx context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	var res [1]ratelimit.Result
	err := s.TakeAll(ctx, []ratelimit.BatchItem{{Policy: p, Key: key, Cost: cost}}, res[:])
	return res[0], err
}

// TakeAll decides several policies of a request at one instant, all or
// nothing, so that a request one policy refuses spends nothing from the
// others: the optional ratelimit.BatchStore. Under the lock it decides each
// request on the state the requests before it left, and writes the states
// only if all were allowed (a refused one's state, which Decide may clip,
// always).
func (s *mapStore) TakeAll(_ context.Context, reqs []ratelimit.BatchItem, results []ratelimit.Result) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixNano()
	next := make(map[string]mapBucket, len(reqs))
	all := true
	for i, r := range reqs {
		key := bucketKey(r.Policy.Name, r.Key)
		b, ok := next[key]
		if !ok {
			b = s.buckets[key]
		}
		res, state := r.Policy.Decide(b.state, now, r.Cost)
		res.Until = state + min(b.credit, math.MaxInt64-state) // what Refund needs, saturated
		results[i], next[key] = res, mapBucket{state, b.credit}
		all = all && res.Allowed
	}
	for i, r := range reqs {
		// All or nothing is spent; a refused request keeps the state
		// Decide gives it (a policy with LimitFor may clip it).
		if key := bucketKey(r.Policy.Name, r.Key); all || !results[i].Allowed {
			s.save(key, next[key], now)
		}
	}
	return nil
}

// save keeps b as the bucket of key, until its state plus its credit has
// passed: a database would expire it then.
func (s *mapStore) save(key string, b mapBucket, now int64) {
	if b.state > now || b.credit > now-b.state { // state + credit > now, without overflow
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
	s.save(key, mapBucket{now, b.credit + min(max(b.state-now, 0), math.MaxInt64-b.credit)}, now)
	return nil
}

// Refund gives back what a take still costs the bucket, so that requests
// that do not count (MiddlewareOptions.CountIf) cost nothing: the optional
// ratelimit.RefundStore. Policy.Refund is the rule, and the credit keeps
// what was given back since the take. (Counting all of it is safe, but
// gives back less when give-backs of one bucket overlap; the memory and
// Redis stores also keep what was given back per take.)
func (s *mapStore) Refund(_ context.Context, p *ratelimit.Policy, key string, cost int64, took ratelimit.Result) error {
	key = bucketKey(p.Name, key)

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixNano()
	b := s.buckets[key]
	next := p.Refund(b.state, now, cost, took.Until-b.credit)
	s.save(key, mapBucket{next, b.credit + min(b.state-next, math.MaxInt64-b.credit)}, now)
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
