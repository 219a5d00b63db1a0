package pace

import (
	"fmt"
	"net/http"
	"strings"
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
	shared   bool   // budgets.spill: it keeps only the waits of every server that draws on it
	from     string // the server whose answer set blocked, in the shared budget

	// Guarded by budgets.mu:
	key       string    // in budgets.m
	users     int       // RoundTrips holding the budget
	freeSince time.Time // its last use, or the end of the wait it was in then
	idx       int       // its place in budgets.free; -1 while in use
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
	status int    // of the answer whose Retry-After holds it, if one does
	quota  Quota  // else the spent quota's declaration
	refill bool   // it waits for the declared refill
	from   string // the server that asked for the wait, when the budget is shared
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
		return t, hold{d: b.blocked.Sub(now), wake: b.changed, status: b.status, quota: b.quota, refill: b.status == 0, from: b.from}, false
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

// settle takes the answer of host to the request of turn t, received at
// now: its status and header fields, or none (h nil) when the request
// failed. A 429 or 503 with Retry-After holds every request until then; a
// 429 leaves nothing; an answer without fields to a request sent on a
// spent quota means the server declares none any more. The shared budget
// keeps only the waits: a Retry-After, or a spent quota's refill. Waiting
// requests are woken up.
func (b *budget) settle(t turn, host string, status int, h http.Header, now time.Time) {
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
		b.block(now.Add(ra), status, Quota{}, host)
	}
	if b.shared {
		if ok && (q.Remaining == 0 || status == http.StatusTooManyRequests) && q.Reset > 0 && !(throttled && hasRA) {
			b.block(now.Add(q.Reset), 0, q, host)
		}
		return
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
	b.declared, b.base, b.baseRecv, b.quota = true, left, b.recv, kept(q)
	b.refill = time.Time{}
	if q.Reset > 0 && !(throttled && hasRA) { // Retry-After takes precedence
		b.refill = now.Add(q.Reset)
	}
}

// block holds every request until then, for a status with Retry-After,
// or a spent quota q's refill (status 0), from host, unless an earlier
// answer holds them longer.
func (b *budget) block(until time.Time, status int, q Quota, host string) {
	if !until.After(b.blocked) {
		return
	}
	b.blocked, b.status = until, status
	if b.shared {
		b.quota, b.from = kept(q), host
	}
}

// end returns when the budget stops holding requests back, now if it
// holds none: the end of a Retry-After, or of a spent quota's wait for its
// refill.
func (b *budget) end(now time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	end := now
	if b.blocked.After(end) {
		end = b.blocked
	}
	if b.declared && b.base-b.inflight <= 0 && b.refill.After(end) {
		end = b.refill
	}
	return end
}

// maxName bounds the policy names that budgets keep for their messages.
const maxName = 64

// kept returns q as a budget keeps it, for its messages: its numbers, and
// its policy's name and unit cut to maxName bytes and copied out of the
// field they came in, so that a long field is not kept with them.
func kept(q Quota) Quota {
	name := strings.Clone(q.Policy[:min(len(q.Policy), maxName)])
	unit := "requests"
	if !countsRequests(q.Unit) {
		unit = strings.Clone(q.Unit[:min(len(q.Unit), maxName)])
	}
	return Quota{Policy: name, Remaining: q.Remaining, Reset: q.Reset, Limit: q.Limit, Window: q.Window, Unit: unit}
}

// cause names what h waits for, at host.
func (h *hold) cause(host string) string {
	shared := ""
	if h.from != "" {
		host, shared = h.from, fmt.Sprintf(", which holds every server past the Transport's %d budgets", maxBudgets)
	}
	switch {
	case h.status != 0:
		return fmt.Sprintf("the Retry-After of a %d from %s%s", h.status, host, shared)
	case h.refill:
		return "the quota of " + host + describeQuota(h.quota) + " to refill" + shared
	}
	return "an answer from " + host + " saying when its spent quota" + describeQuota(h.quota) + " refills"
}

// describeQuota returns q for an error message, such as ` ("default": 0
// left of 10 per 2s)`, or ` ("daily-bytes": 0 content-bytes left)` for a
// quota in another unit than requests.
func describeQuota(q Quota) string {
	s := fmt.Sprintf("%d left", q.Remaining)
	if q.Unit != "" && !countsRequests(q.Unit) {
		s = fmt.Sprintf("%d %s left", q.Remaining, q.Unit)
	}
	if q.Limit > 0 && q.Window > 0 {
		s += fmt.Sprintf(" of %d per %v", q.Limit, q.Window)
	}
	if q.Policy != "" {
		s = fmt.Sprintf("%q: %s", q.Policy, s)
	}
	return " (" + s + ")"
}
