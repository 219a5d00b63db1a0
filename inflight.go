package ratelimit

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"
)

// InFlightPolicyName names the concurrency limit of WithMaxInFlight in
// header fields and problem bodies.
const InFlightPolicyName = "inflight"

// WithMaxInFlight limits how many requests run at once: at most perKey of
// one key and at most total in all (0 for no limit of that kind). A request
// over either limit is refused with 429, Retry-After: 1 and the policy
// "inflight", and what it took from the rate limits is given back. A slot is
// released when the handler returns, also by a panic or because the client
// went away. A request that waits in a shaping queue holds its slot while it
// waits. The limit is kept in the process (with several instances, each
// allows its own N) unless WithSlotStore shares it. The default is no
// limit.
//
// In the IETF format, the limit is listed in RateLimit-Policy with the
// draft's concurrency unit: "inflight";q=3;qu="concurrent-requests".
func WithMaxInFlight(perKey, total int) Option {
	return func(c *config) error {
		if perKey < 0 || total < 0 || perKey == 0 && total == 0 {
			return errors.New("ratelimit: WithMaxInFlight: want a positive limit per key, in total, or both")
		}
		q := perKey
		if q == 0 || total > 0 && total < q {
			q = total
		}
		c.inflight = &inflight{perKey: perKey, total: total, running: map[string]int{},
			item: `"` + InFlightPolicyName + `";q=` + strconv.Itoa(q) + `;qu="concurrent-requests"`,
			refused: Result{
				Policy:     InFlightPolicyName,
				Limit:      Limit{Interval: time.Second, Burst: int64(q)},
				RetryAfter: time.Second,
				ResetAfter: time.Second,
				lists:      &lists{violated: []string{InFlightPolicyName}},
			}}
		return nil
	}
}

// SlotStore keeps in-flight slots that several instances share, so that a
// WithMaxInFlight limit holds across them (redisstore has one). A slot is a
// lease: if the instance holding it dies, the slot frees itself when the
// lease ends.
type SlotStore interface {
	// Acquire takes one of the limit slots of key for at most lease and
	// returns the token that releases it, or ok false when all are taken.
	Acquire(ctx context.Context, key string, limit int64, lease time.Duration) (token string, ok bool, err error)
	// Release gives back the slot of key that token holds.
	Release(ctx context.Context, key, token string) error
}

// WithSlotStore keeps the slots of WithMaxInFlight in s, shared by every
// instance, each slot leased for lease (a request running longer may lose
// its slot to another). A failure of s is answered like a store failure:
// 503, through the error handler. The default keeps slots in the process.
func WithSlotStore(s SlotStore, lease time.Duration) Option {
	return func(c *config) error {
		if s == nil || lease <= 0 {
			return errors.New("ratelimit: WithSlotStore: want a store and a positive lease")
		}
		c.slots, c.lease = s, lease
		return nil
	}
}

// inflight counts the requests running, per key and in all.
type inflight struct {
	perKey, total int
	item          string // the RateLimit-Policy item
	refused       Result // what a refusal reports

	mu      sync.Mutex
	running map[string]int
	all     int
}

// acquire takes a slot for key, if one is free.
func (f *inflight) acquire(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.total > 0 && f.all >= f.total || f.perKey > 0 && f.running[key] >= f.perKey {
		return false
	}
	f.all++
	f.running[key]++
	return true
}

// release gives key's slot back.
func (f *inflight) release(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.all--
	if n := f.running[key] - 1; n > 0 {
		f.running[key] = n
	} else {
		delete(f.running, key)
	}
}

// sharedSlots are the slots of one request in a SlotStore: of its key and
// of the total, as the limits ask.
type sharedSlots struct {
	key, keyToken, totalToken string
}

// acquireShared takes key's slot and a slot of the total in s.
func (f *inflight) acquireShared(ctx context.Context, s SlotStore, lease time.Duration, key string) (sharedSlots, bool, error) {
	held := sharedSlots{key: key}
	if f.perKey > 0 {
		token, ok, err := s.Acquire(ctx, key, int64(f.perKey), lease)
		if !ok || err != nil {
			return held, false, err
		}
		held.keyToken = token
	}
	if f.total > 0 {
		token, ok, err := s.Acquire(ctx, GlobalKey, int64(f.total), lease)
		if !ok || err != nil {
			f.releaseShared(ctx, s, held)
			return held, false, err
		}
		held.totalToken = token
	}
	return held, true, nil
}

// releaseShared gives back the slots of held; a failure leaves them to
// expire with their lease.
func (f *inflight) releaseShared(ctx context.Context, s SlotStore, held sharedSlots) {
	ctx = context.WithoutCancel(ctx)
	if held.keyToken != "" {
		_ = s.Release(ctx, held.key, held.keyToken)
	}
	if held.totalToken != "" {
		_ = s.Release(ctx, GlobalKey, held.totalToken)
	}
}

// list adds the concurrency limit to RateLimit-Policy, as a second field
// line of the same List (RFC 9651 §3.1), in the IETF format.
func (f *inflight) list(h map[string][]string, format HeaderFormat) {
	if format == HeadersIETF {
		h[ietfKeys[0]] = append(h[ietfKeys[0]][:1:1], f.item)
	}
}
