package ratelimit

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/tokenfair/ratelimit/internal/fieldname"
	"github.com/tokenfair/ratelimit/internal/sfv"
)

// inflightName names the in-flight limit in header fields, problem bodies
// and Result.Policy; no other policy may take it.
const inflightName = "inflight"

// newInflight returns the in-flight limits of MiddlewareOptions.MaxInFlight and
// MaxInFlightTotal, at least one of which is positive, named name
// (MiddlewareOptions.SlotName) in a SlotStore.
func newInflight(perKey, total int, name string) *inflight {
	q := perKey
	if q == 0 || total > 0 && total < q {
		q = total
	}
	f := &inflight{perKey: perKey, total: total, name: name, running: map[string]int{},
		item:   `"` + inflightName + `";q=` + strconv.FormatInt(sfv.Clamp(int64(q)), 10) + `;qu="concurrent-requests"`,
		policy: Policy{Name: inflightName, Limit: Per(int64(q), time.Second)},
	}
	f.refused = Result{Policy: &f.policy, RetryAfter: time.Second, ResetAfter: time.Second}
	return f
}

// checkInflightName refuses a limiter with a policy named as the in-flight
// limit, which would be two policies in header fields and problem bodies.
func checkInflightName(l *Limiter) error {
	for _, p := range l.Policies() {
		if p.Name == inflightName {
			return fmt.Errorf("ratelimit: NewMiddleware: policy name %q is reserved for MiddlewareOptions.MaxInFlight", p.Name)
		}
	}
	return nil
}

// inflight counts the requests running, per key and in all.
type inflight struct {
	perKey, total int
	name          string // MiddlewareOptions.SlotName, with Slots
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

// sharedSlots are the slots that one request holds in a SlotStore, of
// its key and of the total as the limits ask, under one token. A timer
// renews their leases until release.
type sharedSlots struct {
	f      *inflight
	s      SlotStore
	ctx    context.Context // the request's, without its cancellation
	lease  time.Duration
	key    string // the SlotStore's key of the request's slot
	token  string
	isHeld [2]bool // the slot of the key, of the total

	mu       sync.Mutex // held by a renewal, so that release waits for it
	renewal  *time.Timer
	released bool
}

// acquireShared takes key's slot and a slot of the total in s, for lease,
// and renews them until they are released.
func (f *inflight) acquireShared(ctx context.Context, s SlotStore, lease time.Duration, key string) (*sharedSlots, bool, error) {
	h := &sharedSlots{f: f, s: s, ctx: context.WithoutCancel(ctx), lease: lease, key: f.name + ":" + key, token: rand.Text()}
	for i, limit := range [2]int{f.perKey, f.total} {
		if limit == 0 {
			continue
		}
		ok, err := s.Acquire(ctx, h.keyOf(i), h.token, int64(limit), lease)
		if !ok || err != nil {
			h.release()
			return nil, false, err
		}
		h.isHeld[i] = true
	}
	h.mu.Lock() // before the first renewal reads h.renewal
	h.renewal = time.AfterFunc(lease/3, h.renew)
	h.mu.Unlock()
	return h, true, nil
}

// keyOf returns the SlotStore's key of the slot of the key (i = 0) or of
// the total (1).
func (h *sharedSlots) keyOf(i int) string {
	if i == 0 {
		return h.key
	}
	return h.f.name
}

// renew extends the leases of h, and runs again a third of a lease later,
// until h is released. A failure leaves the lease to the next renewal.
func (h *sharedSlots) renew() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return
	}
	for i, limit := range [2]int{h.f.perKey, h.f.total} {
		if h.isHeld[i] {
			_, _ = h.s.Acquire(h.ctx, h.keyOf(i), h.token, int64(limit), h.lease)
		}
	}
	h.renewal.Reset(h.lease / 3)
}

// release stops the renewals, once the one running has ended, and gives
// the slots back; a failure leaves them to expire with their lease.
func (h *sharedSlots) release() {
	h.mu.Lock()
	h.released = true
	if h.renewal != nil {
		h.renewal.Stop()
	}
	h.mu.Unlock()
	for i := range h.isHeld {
		if h.isHeld[i] {
			_ = h.s.Release(h.ctx, h.keyOf(i), h.token)
		}
	}
}

// addPolicyItem adds the concurrency limit to the List of RateLimit-Policy, in the
// IETF format, on the same field line, so that a client that reads only
// the first line of the field sees it too.
func (f *inflight) addPolicyItem(h map[string][]string, format HeaderFormat) {
	switch v := h[fieldname.Policy.Draft]; {
	case format != HeadersIETF || len(v) != 1:
	case v[0] == "": // no policy to list but this one
		h[fieldname.Policy.Draft] = []string{f.item}
	default:
		h[fieldname.Policy.Draft] = []string{v[0] + "," + f.item}
	}
}
