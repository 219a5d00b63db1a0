package pace

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// budget is what the Transport knows of one Key's quota at a server:
// what is left after the newest request the server answered, less every
// request in flight. Of two answers, the newer is the one to a request sent
// after the other answer came, else the one with less left (between
// refills, the server answered it later); so what is left is never
// overestimated, and is exact once the requests in flight are answered.
type budget struct {
	mu       sync.Mutex
	declared bool      // an answer declared the quota: without, requests go freely
	base     int64     // what the newest answer declared left
	baseRecv uint64    // the answers received when it came
	refill   time.Time // when more quota is made available; zero: not declared
	quota    Quota     // the newest answer's declaration
	blocked  time.Time // until then, a Retry-After holds every request
	status   int       // the status of the answer that set blocked
	inflight int64     // requests sent whose answers have not come
	probing  bool      // a request sent on a spent quota, to learn more, has no answer yet
	recv     uint64    // the answers received
	changed  chan struct{}

	users int // RoundTrips holding the budget; guarded by budgets.mu
}

// turn is one request's place in its budget.
type turn struct {
	after uint64 // the answers received when it was sent
	probe bool
}

// hold is why a request may not go yet: it must wait d, or, for d < 0,
// until an answer comes. Either way an answer wakes it up to look again.
type hold struct {
	d      time.Duration
	wake   <-chan struct{}
	status int   // of the answer whose Retry-After holds it, if one does
	quota  Quota // else the spent quota's declaration
	refill bool  // it waits for the declared refill
}

// take gives the request its turn at now, or says why it must wait: a
// Retry-After in force; the declared quota spent, until its refill; or,
// once that is due or when none was declared, another request sent to
// learn more, until its answer.
func (b *budget) take(now time.Time) (turn, hold, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed == nil {
		b.changed = make(chan struct{})
	}
	t := turn{after: b.recv}
	switch {
	case now.Before(b.blocked):
		return t, hold{d: b.blocked.Sub(now), wake: b.changed, status: b.status}, false
	case !b.declared || b.base-b.inflight > 0:
	case now.Before(b.refill):
		return t, hold{d: b.refill.Sub(now), wake: b.changed, quota: b.quota, refill: true}, false
	case !b.probing:
		b.probing, t.probe = true, true
	default:
		return t, hold{d: -1, wake: b.changed, quota: b.quota}, false
	}
	b.inflight++
	return t, hold{}, true
}

// settle takes the answer to the request of turn t, received at now: its
// status and header fields, or none (h nil) when the request failed. A
// 429 or 503 with Retry-After holds every request until then; a 429
// leaves nothing; an answer without fields to a request sent on a spent
// quota means the server declares none any more. Waiting requests are
// woken up.
func (b *budget) settle(t turn, status int, h http.Header, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inflight--
	b.recv++
	if t.probe {
		b.probing = false
	}
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	if h == nil || len(h["Age"]) > 0 && h.Get("Age") != "0" { // failed, or from a cache
		return
	}
	q, ok := Read(h, now)
	throttled := status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
	ra, hasRA := RetryAfter(h, now)
	if throttled && hasRA {
		if until := now.Add(ra); until.After(b.blocked) {
			b.blocked, b.status = until, status
		}
	}
	left := q.Remaining
	switch {
	case status == http.StatusTooManyRequests:
		left, ok = 0, true
	case !ok:
		if !throttled && t.probe {
			b.declared = false
		}
		return
	}
	if b.declared && t.after < b.baseRecv && left >= b.base {
		return // an answer older than the base
	}
	b.declared, b.base, b.baseRecv, b.quota = true, left, b.recv, q
	b.refill = time.Time{}
	if q.Reset > 0 && !(throttled && hasRA) { // Retry-After takes precedence
		b.refill = now.Add(q.Reset)
	}
}

// cause names what h waits for, at host.
func (h *hold) cause(host string) string {
	switch {
	case h.status != 0:
		return fmt.Sprintf("the Retry-After of a %d from %s", h.status, host)
	case h.refill:
		return "the quota of " + host + describeQuota(h.quota) + " to refill"
	}
	return "an answer from " + host + " saying when its spent quota" + describeQuota(h.quota) + " refills"
}

// describeQuota returns q for an error message, such as ` ("default": 0
// left, 10 a 2s window)`.
func describeQuota(q Quota) string {
	s := fmt.Sprintf("%d left", q.Remaining)
	if q.Limit > 0 && q.Window > 0 {
		s += fmt.Sprintf(" of %d per %v", q.Limit, q.Window)
	}
	if q.Policy != "" {
		s = fmt.Sprintf("%q: %s", q.Policy, s)
	}
	return " (" + s + ")"
}

// budgets holds the Transport's budgets by key. It forgets the budgets
// that no request uses and that hold nothing in force, past maxBudgets.
type budgets struct {
	mu sync.Mutex
	m  map[string]*budget
}

const maxBudgets = 1024

// get returns key's budget, which the caller must put back.
func (bs *budgets) get(key string, now time.Time) *budget {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b := bs.m[key]
	if b == nil {
		if bs.m == nil {
			bs.m = make(map[string]*budget)
		}
		if len(bs.m) >= maxBudgets {
			bs.sweep(now)
		}
		b = new(budget)
		bs.m[key] = b
	}
	b.users++
	return b
}

func (bs *budgets) put(b *budget) {
	bs.mu.Lock()
	b.users--
	bs.mu.Unlock()
}

// sweep forgets the budgets that no request holds and whose Retry-After
// and refill are past.
func (bs *budgets) sweep(now time.Time) {
	for k, b := range bs.m {
		b.mu.Lock()
		idle := b.users == 0 && !now.Before(b.blocked) && !now.Before(b.refill)
		b.mu.Unlock()
		if idle {
			delete(bs.m, k)
		}
	}
}
