package redisstore

import (
	"context"
	"errors"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
)

// Take implements [ratelimit.Store] in one round trip, or none when the
// key's lease answers or the refusal cache already refuses the request.
func (s *Store) Take(ctx context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	leased := s.leases != nil && leasable(p)
	if !leased && s.refusals == nil {
		return s.takeOne(ctx, 0, p, key, cost)
	}
	fp := fingerprint(s.seed, p.Name, key)
	// What the refusal cache may refuse: not a charge past empty (algo.Debt),
	// which is always allowed.
	asks := cost > 0 && p.Algorithm != algo.Debt || cost == 0 && p.Algorithm == algo.Ban
	if leased {
		// The key's lease answers, without a round trip: a request it
		// pays for, a look at the bucket (cost 0), tokens given back.
		var res ratelimit.Result
		var ok, held bool
		if res, ok, held = s.leases.spend(fp, p, cost); ok {
			return res, nil
		}
		// A lease that ended or cannot pay goes back with this request
		// (takeLeased): the refusal cache counts its tokens as spent.
		asks = asks && !held
	}
	if s.refusals != nil && asks {
		if res, ok := s.refusals.refuse(fp, p, cost); ok {
			return res, nil
		}
	}
	if leased && cost > 0 {
		return s.takeLeased(ctx, fp, p, key, cost)
	}
	return s.takeOne(ctx, fp, p, key, cost)
}

// Probe asks Redis itself, the server or the Cluster primary of key,
// whether it answers: a look at key's bucket under p (cost 0), never
// answered by a lease or the refusal cache, which answer without Redis. A
// failover.Store probes a degraded part of it so.
func (s *Store) Probe(ctx context.Context, p *ratelimit.Policy, key string) error {
	_, err := s.takeOne(ctx, 0, p, key, 0)
	return err
}

// leasable reports whether p's tokens may be leased: those of a token
// bucket or a leaky bucket policing, but a calendar quota's, whose tokens
// all come back at once at its reset, leased or not. A penalty box's
// buckets have algorithms of their own (the Store contract), whose strikes
// and bans must be counted where every instance sees them; a charge past
// empty (algo.Debt) is the bucket's own.
func leasable(p *ratelimit.Policy) bool {
	return (p.Algorithm == ratelimit.TokenBucket || p.Algorithm == ratelimit.LeakyPolice) && p.Limit.Interval() != 0
}

// takeOne decides a request in Redis, without a lease.
func (s *Store) takeOne(ctx context.Context, fp uint64, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	var res [1]ratelimit.Result
	fps := [1]uint64{fp}
	if err := s.take(ctx, []ratelimit.BatchItem{{Policy: p, Key: key, Cost: cost}}, res[:], fps[:]); err != nil {
		return ratelimit.Result{}, err
	}
	return res[0], nil
}

// TakeAll implements [ratelimit.BatchStore] in one round trip, or none when
// the refusal cache refuses one of the requests. It returns
// errors.ErrUnsupported, and the Limiter takes the policies one at a
// time, when the keys may live on different nodes (on a Cluster, keys of
// different slots: give per-client keys a hash tag such as "{client-42}";
// on a Ring, any two keys) and, with Options.Lease, when a policy may
// lease.
func (s *Store) TakeAll(ctx context.Context, reqs []ratelimit.BatchItem, results []ratelimit.Result) error {
	if !s.oneNode(reqs) || s.leases != nil && slices.ContainsFunc(reqs, func(r ratelimit.BatchItem) bool { return leasable(r.Policy) }) {
		return errors.ErrUnsupported
	}
	if s.refusals == nil {
		return s.run(ctx, reqs, results)
	}
	var buf [4]uint64
	fps := buf[:0]
	for _, r := range reqs {
		fps = append(fps, fingerprint(s.seed, r.Policy.Name, r.Key))
	}
	if s.refusals.refuseAll(fps, reqs, results) {
		return nil
	}
	return s.take(ctx, reqs, results, fps)
}

// take runs reqs in Redis and keeps what the answers say in the refusal
// cache; fps are the fingerprints of reqs' buckets (unused without the
// cache).
func (s *Store) take(ctx context.Context, reqs []ratelimit.BatchItem, results []ratelimit.Result, fps []uint64) error {
	if s.refusals == nil {
		return s.run(ctx, reqs, results)
	}
	sent := s.refusals.now()
	for i, r := range reqs {
		if r.Cost < 0 {
			s.refusals.forget(fps[i])
		}
	}
	if err := s.run(ctx, reqs, results); err != nil {
		return err
	}
	// A refused batch spent nothing: the results of its allowed requests
	// are what they would have left, not what their buckets hold.
	all := !slices.ContainsFunc(results[:len(reqs)], func(res ratelimit.Result) bool { return !res.Allowed })
	for i, r := range reqs {
		if r.Cost >= 0 && (all || !results[i].Allowed) {
			s.refusals.record(fps[i], r, sent, results[i])
		}
	}
	return nil
}

// oneNode reports whether the keys of reqs are sure to live on one node.
func (s *Store) oneNode(reqs []ratelimit.BatchItem) bool {
	switch s.client.(type) {
	case *redis.ClusterClient:
		slot := -1
		for _, r := range reqs {
			k := slotOf(s.key(r))
			if slot >= 0 && k != slot {
				return false
			}
			slot = k
		}
		return true
	case *redis.Ring:
		return len(reqs) < 2
	}
	return true
}
