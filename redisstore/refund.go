package redisstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/tokenfair/ratelimit"
)

var _ ratelimit.RefundStore = (*Store)(nil)

// Refund implements [ratelimit.RefundStore] in one round trip, within the
// store's Timeout: the script credits the bucket by the rule of
// [ratelimit.Policy.Refund] at the Redis server's now, unless the bucket's
// reset mark says that it was reset after took's decision. Tokens that a
// lease paid for go back into that lease while it lasts (no round trip),
// and are lost once it has ended. A key whose name cannot share a Cluster
// slot with its mark (it holds a "}" but no hash tag) gets nothing back.
func (s *Store) Refund(parent context.Context, p *ratelimit.Policy, key string, cost int64, took ratelimit.Result) error {
	if cost <= 0 || took.Until == 0 {
		return nil
	}
	fp := fingerprint(s.seed, p.Name, key)
	if took.Until < 0 { // paid by a lease
		if s.leases != nil {
			s.leases.refund(fp, p, cost, took.Until)
		}
		return nil
	}
	bucket := s.key(ratelimit.Request{Policy: p, Key: key})
	mark, ok := s.markKey(bucket)
	if !ok {
		return nil
	}
	if s.refusals != nil {
		defer s.refusals.forget(fp) // it may refuse what the bucket now has
	}
	ctx, cancel := context.WithTimeout(parent, s.timeout)
	defer cancel()
	c := s.newCall(ctx, 2)
	s.dials.watch(&c.watch, ctx, cancel)
	defer s.dials.done(&c.watch)
	c.keys()[0], c.keys()[1] = bucket, mark
	inc, taken, span := cost*int64(p.Limit.Interval()), took.Until-int64(took.ResetAfter), markSpan(p)
	c.args = append(c.args,
		"refund", inc/1e9, inc%1e9, took.Until/1e9, took.Until%1e9,
		"mark", taken/1e9, taken%1e9, span/1e9, span%1e9)
	reply, err := s.decide(c)
	s.dials.done(&c.watch)
	if err != nil {
		return fmt.Errorf("redisstore: Refund: %w", s.failure(parent, ctx, &c.watch, err))
	}
	if _, err := groupNow(reply, 2); err != nil {
		return err
	}
	return nil
}

// markSlack is how much longer than markSpan a reset mark is kept, in ms:
// the script's SLACK, for a store on the caller's clock.
const markSlack = 10000

// markSpan returns how long after a reset of a bucket of p a refund of a
// take made before it may come: a decision's tokens are given back until
// its Result.Until, at most twice the policy's span after it (a shaping
// queue's longest wait and the cost after it).
func markSpan(p *ratelimit.Policy) int64 {
	return 2 * p.Limit.Burst() * int64(p.Limit.Interval())
}

// markKey returns the name of the reset mark of the bucket named bucket,
// under the store's prefix and in the same Redis Cluster slot: the
// bucket's name and ":reset" when it has a hash tag, else the prefix and
// the whole name as the hash tag; ok is false when neither works (a name
// with a "}" and no hash tag).
func (s *Store) markKey(bucket string) (mark string, ok bool) {
	if i := strings.IndexByte(bucket, '{'); i >= 0 {
		if j := strings.IndexByte(bucket[i+1:], '}'); j > 0 {
			return bucket + ":reset", true
		}
	}
	if strings.IndexByte(bucket, '}') >= 0 || strings.IndexByte(s.prefix, '{') >= 0 {
		return "", false
	}
	return s.prefix + "{" + bucket + "}:reset", true
}
