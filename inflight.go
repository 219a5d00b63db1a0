package ratelimit

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// inflightName names the in-flight limit in header fields, problem bodies
// and Result.Policy; no other policy may take it.
const inflightName = "inflight"

// newInflight returns the in-flight limits of Options.MaxInFlight and
// MaxInFlightTotal, at least one of which is positive, named name
// (Options.SlotName) in a SlotStore.
func newInflight(perKey, total int, name string) *inflight {
	q := perKey
	if q == 0 || total > 0 && total < q {
		q = total
	}
	f := &inflight{perKey: perKey, total: total, name: name, running: map[string]int{},
		item:   `"` + inflightName + `";q=` + strconv.FormatInt(sfInteger(int64(q)), 10) + `;qu="concurrent-requests"`,
		policy: Policy{Name: inflightName, Limit: Per(int64(q), time.Second)},
	}
	f.refused = Result{Policy: &f.policy, RetryAfter: time.Second, ResetAfter: time.Second,
		lists: &lists{violated: []string{inflightName}}}
	return f
}

// SlotStore keeps in-flight slots that several instances share, so that
// Options.MaxInFlight holds across them (redisstore has one). A slot is a
// lease: if the instance holding it dies, the slot frees itself when the
// lease ends. A Middleware's keys are its Options.SlotName, for the slots
// of MaxInFlightTotal, and SlotName + ":" + the request's key.
// Implementations must be safe for concurrent use.
type SlotStore interface {
	// Acquire takes one of the limit slots of key for at most lease and
	// returns the token that releases it, or ok false when all are taken.
	Acquire(ctx context.Context, key string, limit int64, lease time.Duration) (token string, ok bool, err error)
	// Release gives back the slot of key that token holds.
	Release(ctx context.Context, key, token string) error
}

// inflight counts the requests running, per key and in all.
type inflight struct {
	perKey, total int
	name          string // Options.SlotName, with Slots
	item          string // the RateLimit-Policy item
	policy        Policy // what a refusal names: "inflight", q per second
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
	key, keyToken, totalToken string // key: the SlotStore's key of the request's slot
}

// acquireShared takes key's slot and a slot of the total in s.
func (f *inflight) acquireShared(ctx context.Context, s SlotStore, lease time.Duration, key string) (sharedSlots, bool, error) {
	held := sharedSlots{key: f.name + ":" + key}
	if f.perKey > 0 {
		token, ok, err := s.Acquire(ctx, held.key, int64(f.perKey), lease)
		if !ok || err != nil {
			return held, false, err
		}
		held.keyToken = token
	}
	if f.total > 0 {
		token, ok, err := s.Acquire(ctx, f.name, int64(f.total), lease)
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
		_ = s.Release(ctx, f.name, held.totalToken)
	}
}

// list adds the concurrency limit to the List of RateLimit-Policy, in the
// IETF format, on the same field line, so that a client that reads only
// the first line of the field sees it too.
func (f *inflight) list(h map[string][]string, format HeaderFormat) {
	switch v := h[policyKey.draft]; {
	case format != HeadersIETF || len(v) != 1:
	case v[0] == "": // no policy to list but this one
		h[policyKey.draft] = []string{f.item}
	default:
		h[policyKey.draft] = []string{v[0] + "," + f.item}
	}
}
