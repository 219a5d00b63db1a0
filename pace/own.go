package pace

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

// own applies Options.Limit per key, with a Limiter on a memory store. A
// rate is a LeakyShape queue that lets the burst through at once (the
// first request and Immediate more) and gives each further request its
// turn, so that a request knows at once how long it will wait: the queue's
// room is MaxWait beyond the burst. A calendar
// quota is a token bucket, waited for until its reset.
type own struct {
	lim    *ratelimit.Limiter
	limit  ratelimit.Limit // as given, for messages
	shaped bool
	room   time.Duration // a shaped queue's room beyond the burst
}

// maxRoom bounds the queue's room, so that its bucket's span stays within
// what a Limit may hold.
const maxRoom = 10 * 365 * 24 * time.Hour

func newOwn(l ratelimit.Limit, maxWait time.Duration) (*own, error) {
	store, err := memorystore.New(nil)
	if err != nil {
		return nil, err
	}
	p := ratelimit.Policy{Name: "own", Limit: l}
	if _, err := ratelimit.New(store, p); err != nil {
		return nil, fmt.Errorf("pace: Options.Limit: %w", err)
	}
	o := &own{limit: l}
	if iv := l.Interval(); iv > 0 {
		extra := int64((min(max(maxWait, 0), maxRoom) + iv - 1) / iv)
		o.shaped, o.room = true, time.Duration(extra)*iv
		p.Limit = l.WithBurst(l.Burst() + extra)
		p.Algorithm, p.Immediate, p.MaxDelay = ratelimit.LeakyShape, l.Burst()-1, o.room
	}
	if o.lim, err = ratelimit.New(store, p); err != nil {
		return nil, fmt.Errorf("pace: Options.Limit %v with MaxWait %v: %w", l, maxWait, err)
	}
	return o, nil
}

// wait holds the request until the own limit lets it go, and returns its
// take, to give back if the request is not sent after all.
func (o *own) wait(w *waiter, key string) (ratelimit.Result, error) {
	for {
		res, err := o.lim.Take(w.ctx, key, 1)
		if err != nil {
			return res, fmt.Errorf("pace: Options.Limit: %w", err)
		}
		d, then := res.Delay, time.Duration(0)
		if !res.Allowed { // wait, then take again
			d, then = res.RetryAfter, res.RetryAfter
			if o.shaped {
				d += o.room
			}
		}
		if e := w.check(d); e != nil {
			o.giveBack(w.ctx, key, res)
			e.Cause = "the own limit of " + o.limit.String() + " (Options.Limit)"
			return res, e
		}
		if res.Allowed {
			if d > 0 {
				if _, err := w.wait(d, nil); err != nil {
					o.giveBack(w.ctx, key, res)
					return res, err
				}
			}
			return res, nil
		}
		if _, err := w.wait(then, nil); err != nil {
			return res, err
		}
	}
}

// giveBack returns the token of res, a take of key, when it was allowed.
func (o *own) giveBack(ctx context.Context, key string, res ratelimit.Result) {
	if res.Allowed {
		_ = o.lim.Refund(context.WithoutCancel(ctx), key, 1, res) // a memory store never fails
	}
}
