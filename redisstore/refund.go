package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/tokenfair/ratelimit"
)

var _ ratelimit.RefundStore = (*Store)(nil)

// Refund implements [ratelimit.RefundStore] in one round trip, within the
// store's Timeout: the script gives back what the take still costs the
// bucket at the Redis server's now (take.lua's "refund"). Tokens that a
// lease paid for go back into that lease while it lasts, without a round
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
	ctx, cancel := context.WithTimeout(parent, s.timeout)
	defer cancel()
	c := s.newCall(ctx, 1)
	s.dials.watch(&c.watch, ctx, cancel)
	defer s.dials.done(&c.watch)
	c.keys()[0] = s.key(ratelimit.Request{Policy: p, Key: key})
	inc := cost * int64(p.Limit.Interval())
	c.args = append(c.args, "refund", inc/1e9, inc%1e9, took.Until/1e9, took.Until%1e9)
	reply, err := s.decide(c)
	s.dials.done(&c.watch)
	if errors.Is(err, ratelimit.ErrKeyState) {
		return keyError([]ratelimit.Request{{Policy: p, Key: key, Cost: cost}}, err)
	}
	if err != nil {
		return fmt.Errorf("redisstore: Refund: %w", s.failure(parent, ctx, &c.watch, err))
	}
	_, err = groupNow(reply, 1)
	return err
}
