package redisstore

import (
	"context"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
)

var _ ratelimit.RefundStore = (*Store)(nil)

// Refund implements [ratelimit.RefundStore] in one round trip: the bucket
// gets back at most cost tokens, fewer when it has since earned some of
// them back (take.lua's "refund"). Tokens that
// a lease paid for go back into that lease while it lasts, without a round
// trip, and are lost once it has ended.
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
	if s.refusals != nil {
		defer s.refusals.forget(fp) // it may refuse what the bucket now has
	}
	reqs := []ratelimit.BatchItem{{Policy: p, Key: key, Cost: cost}}
	var buf [1]period
	periods := s.periods(reqs, buf[:0])
	_, _, err := s.group(parent, reqs, periods, func(args []any, _ ratelimit.BatchItem, q period) []any {
		if q.end != 0 { // a calendar quota's, at its period's end, a token a nanosecond
			args = append(args, "quota-refund", cost/1e9, cost%1e9, took.Until/1e9, took.Until%1e9)
			return appendPeriod(args, q)
		}
		inc := algo.Mul(cost, int64(p.Limit.Interval()))
		return append(args, "refund", inc/1e9, inc%1e9, took.Until/1e9, took.Until%1e9)
	})
	return err
}
