package ratelimit

// How a request that may not proceed is answered: the 429 problem body,
// the answers to errors, and their log lines.

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tokenfair/ratelimit/internal/algo"
	"github.com/tokenfair/ratelimit/internal/clientkey"
	"github.com/tokenfair/ratelimit/internal/jsontext"
	"github.com/tokenfair/ratelimit/internal/keyhash"
)

// denyProblem is the default MiddlewareOptions.OnDeny: 429 with the quota-exceeded
// problem body.
func denyProblem(w http.ResponseWriter, _ *http.Request, res Result) {
	detail := "Too many requests; retry after " + strconv.FormatInt(retryAfterSeconds(res.RetryAfter), 10) + " s."
	if isBan(res) {
		detail = "Banned after repeated refusals, for " + strconv.FormatInt(retryAfterSeconds(res.RetryAfter), 10) + " s more."
	}
	writeProblem(w, http.StatusTooManyRequests, problemQuotaExceeded, "Quota Exceeded", detail, &res)
}

// banned reports whether res is the refusal of a penalty box's ban: its
// only result is the ban's.
func isBan(res Result) bool {
	return len(res.Results) == 1 && res.Results[0].Policy != nil && res.Results[0].Policy.Algorithm == algo.Ban
}

// appendViolated appends the member "violated-policies": the names of the
// enforcing policies that refused res.
func appendViolated(b []byte, res Result) []byte {
	b = append(b, `,"violated-policies":[`...)
	if res.Results == nil && res.Policy != nil {
		b = jsontext.AppendString(b, res.Policy.Name, true)
	}
	first := true
	for _, r := range res.Results {
		if !r.Allowed && !r.Policy.DryRun {
			if !first {
				b = append(b, ',')
			}
			b, first = jsontext.AppendString(b, r.Policy.Name, true), false
		}
	}
	return append(b, ']')
}

// storeLinesEvery is the least time between two log lines about store
// failures.
const storeLinesEvery = 10 * time.Second

// errorAnswers is a Middleware's default error handler (a nil
// MiddlewareOptions.OnError), with its logger, challenge and log state:
// it answers with a problem body that never holds the error's text, and
// logs the first refusal of each kind, every 500, and store failures at
// most once every storeLinesEvery (docs/http.md).
type errorAnswers struct {
	log        *slog.Logger // nil: slog.Default() at the time of the line
	challenge  string       // of a 401, instead of the error's; "": the error's
	storeLines *logSpacing
	refusals   *refusals
}

// problem is how the default error handler answers an error.
type problem struct {
	status             int
	typ, title, detail string
	challenge          string         // of a 401
	kind               clientkey.Kind // of a 400 or 401, or of a misconfiguration
	misconfigured      bool           // a 500 that fails every request alike: logged once
	retryAfter         bool
}

// describe returns the answer to err.
func describe(err error) problem {
	var ce *clientkey.Error // nil unless err explains itself
	errors.As(err, &ce)
	switch {
	case errors.Is(err, ErrMissingKey):
		p := problem{status: http.StatusUnauthorized, typ: "about:blank", title: "Missing Credentials",
			detail: "the request carries no credentials by which to limit it", challenge: "Bearer", kind: clientkey.KindMissingKey}
		if ce != nil {
			p.detail, p.kind = ce.Detail, ce.Kind
			if ce.Challenge != "" {
				p.challenge = ce.Challenge
			}
		}
		return p
	case errors.Is(err, ErrBadRequest):
		p := problem{status: http.StatusBadRequest, typ: "about:blank", title: "Bad Request",
			detail: "the request cannot be rate-limited as it is", kind: clientkey.KindBadRequest}
		if ce != nil {
			p.detail, p.kind = ce.Detail, ce.Kind
		}
		if errors.Is(err, errCostExceedsBurst) {
			p.title, p.kind = "Request Cost Exceeds Capacity", clientkey.KindCostAboveBurst
			if ce == nil {
				p.detail = "the request's cost is above the burst of a policy"
			}
		}
		return p
	case errors.Is(err, ErrStore):
		return problem{status: http.StatusServiceUnavailable, typ: problemReducedCapacity, title: "Temporary Reduced Capacity",
			detail: "the rate limit cannot be checked for now; retry after 1 s", retryAfter: true}
	case errors.Is(err, errWaitAbandoned):
		return problem{status: http.StatusServiceUnavailable, typ: "about:blank", title: "Service Unavailable",
			detail: "the request left the queue before its turn", retryAfter: true}
	}
	p := problem{status: http.StatusInternalServerError, typ: "about:blank", title: "Internal Server Error",
		detail: "the rate limit could not be checked"}
	if ce != nil { // a misconfiguration that explains itself, such as a user ID of an unusable type
		p.kind, p.misconfigured = ce.Kind, true
	}
	return p
}

// answer logs and answers err as a says.
func (a errorAnswers) answer(w http.ResponseWriter, r *http.Request, err error) {
	p := describe(err)
	log := a.logger()
	switch {
	case p.status < 500 || p.misconfigured:
		a.logRefusal(log, r, err, p)
	case !errors.Is(err, errWaitAbandoned):
		args := []any{"method", r.Method, "path", r.URL.Path, "status", p.status, "err", err}
		suppressed, ok := int64(0), true
		if errors.Is(err, ErrStore) {
			suppressed, ok = a.storeLines.due(time.Now())
		}
		if ok {
			if suppressed > 0 {
				args = append(args, "suppressed", suppressed)
			}
			log.ErrorContext(r.Context(), "ratelimit: cannot decide request", args...)
		}
	}
	h := w.Header()
	if p.retryAfter {
		h.Set("Retry-After", "1")
	}
	if p.status == http.StatusUnauthorized {
		if a.challenge != "" {
			p.challenge = a.challenge
		}
		h.Set("WWW-Authenticate", p.challenge)
	}
	writeProblem(w, p.status, p.typ, p.title, p.detail, nil)
}

func (a errorAnswers) logger() *slog.Logger {
	if a.log != nil {
		return a.log
	}
	return slog.Default()
}

// logRefusal logs the refusal p of err, a 400 or 401: at the warning level
// if it is the first of its kind (see logFirstRefusal), else at the debug level, with the error, which may quote the value at
// fault (a forwarding header's entry, clipped), never an API key or user ID.
// A misconfiguration (a 500 that every request gets alike) is logged the
// same way, the first at the error level, with the error, which names
// what is wrong (a type) and no value.
func (a errorAnswers) logRefusal(log *slog.Logger, r *http.Request, err error, p problem) {
	if p.misconfigured && a.refusals.first(p.kind) {
		logMisconfigured(log, r, err, p)
		return
	}
	if !p.misconfigured && a.refusals.first(p.kind) {
		logFirstRefusal(log, r, err, p)
		return
	}
	log.DebugContext(r.Context(), "ratelimit: cannot decide request", "method", r.Method, "path", r.URL.Path, "status", p.status, "err", err)
}

// noteRefusal logs err, for a Middleware with a caller's OnError, if
// it is the first refusal of its kind.
func (a errorAnswers) noteRefusal(r *http.Request, err error) {
	p := describe(err)
	if p.status >= 500 && !p.misconfigured || !a.refusals.first(p.kind) {
		return
	}
	if p.misconfigured {
		logMisconfigured(a.logger(), r, err, p)
		return
	}
	logFirstRefusal(a.logger(), r, err, p)
}

// logFirstRefusal logs the first refusal p of its kind, of err, at the
// warning level, with the detail that quotes no value, and for a 401 the
// error too, which names what was looked for and found nothing.
func logFirstRefusal(log *slog.Logger, r *http.Request, err error, p problem) {
	attrs := []any{"refusal", p.kind.String(), "status", p.status, "detail", p.detail, "method", r.Method, "path", r.URL.Path}
	if p.status == http.StatusUnauthorized {
		attrs = append(attrs, "err", err)
	}
	log.WarnContext(r.Context(), "ratelimit: refused a request that cannot be limited (the first of its kind)", attrs...)
}

// logMisconfigured logs the first answer p to err, a misconfiguration, at
// the error level.
func logMisconfigured(log *slog.Logger, r *http.Request, err error, p problem) {
	log.ErrorContext(r.Context(), "ratelimit: cannot decide any request so (the first of its kind; later ones at the debug level)",
		"refusal", p.kind.String(), "status", p.status, "err", err, "method", r.Method, "path", r.URL.Path)
}

// refusals notes the kinds of refusal already logged.
type refusals struct {
	seen [clientkey.NumKinds]atomic.Bool
}

// first reports whether k is seen for the first time, and notes it. After
// the first, it only reads.
func (s *refusals) first(k clientkey.Kind) bool {
	if k >= clientkey.NumKinds {
		return false
	}
	return !s.seen[k].Load() && s.seen[k].CompareAndSwap(false, true)
}

// logSpacing lets one log line through per period and counts the others.
type logSpacing struct {
	every      time.Duration
	next       atomic.Int64 // Unix nanoseconds before which lines are only counted
	suppressed atomic.Int64
}

// due reports whether a line may be logged at now, and how many were
// suppressed since the last one.
func (l *logSpacing) due(now time.Time) (suppressed int64, ok bool) {
	next := l.next.Load()
	if now.UnixNano() < next || !l.next.CompareAndSwap(next, now.UnixNano()+int64(l.every)) {
		l.suppressed.Add(1)
		return 0, false
	}
	return l.suppressed.Swap(0), true
}

const (
	problemQuotaExceeded   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// writeProblem writes an RFC 9457 problem body. Every string is escaped as
// encoding/json escapes it (HTML characters included), so that an adapter
// that re-encodes the body, such as Echo's error handler, writes the same
// bytes.
func writeProblem(w http.ResponseWriter, status int, typ, title, detail string, refused *Result) {
	b := make([]byte, 0, 256)
	b = append(b, `{"type":`...)
	b = jsontext.AppendString(b, typ, true)
	b = append(b, `,"title":`...)
	b = jsontext.AppendString(b, title, true)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	if detail != "" {
		b = append(b, `,"detail":`...)
		b = jsontext.AppendString(b, detail, true)
	}
	if refused != nil {
		b = appendViolated(b, *refused)
	}
	b = append(b, "}\n"...)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// answer answers r as d says: an exempt or undecided request at once; a
// decided one is observed, its header fields written, and answered
// through the error or the deny handler, or by running next once its
// turn has come (finish).
//
// An allowed request first takes what it holds while it waits or runs: an
// in-flight slot (MaxInFlight) until next returns or panics, a place in
// the shaping queues (MaxQueued) until its wait ends. It takes them before
// it is observed and answered, since a refusal for want of them is a
// refusal.
func (m *Middleware) answer(w http.ResponseWriter, r *http.Request, next func(*http.Request) (int, int64), d *decision) {
	if !d.decided {
		switch {
		case d.err != nil:
			m.undecided(w, r, d.err)
		case d.exempt == blocked:
			forbid(w)
		default:
			next(r)
		}
		return
	}
	if d.err == nil && d.res.Allowed && m.cfg.inflight != nil {
		var release func()
		if release, d.res, d.err = m.holdSlot(r, d); release != nil {
			defer release()
		}
	}
	if d.err == nil && d.res.Allowed && d.res.Delay > 0 {
		m.enqueue(r, d)
		defer m.dequeue(d) // freed when the wait ends; this, after a panic before
	}
	if m.cfg.Observe != nil {
		m.cfg.Observe(r, Event{Limiter: d.lim, KeyHash: keyhash.Sum(d.key), Result: d.res, Err: d.err, Elapsed: time.Since(d.start)})
	}
	if m.keys != nil && d.err == nil {
		m.keys.see(d.key, m.cfg.Logger)
	}
	switch {
	case d.err != nil:
		m.fail(w, r, d.err)
	case !d.res.Allowed:
		m.refuse(w, r, d)
	default:
		m.writeHeaders(w.Header(), d.lim, d.res)
		if d.res.Delay > 0 {
			m.wait(w, r, d)
		}
	}
	m.finish(r, next, d)
}

// holdSlot takes an in-flight slot for the request that d allowed
// (MaxInFlight), counted in its limiter's occupancy (internal/occupancy)
// while held, and returns the function that releases it. When no slot
// is free it returns the in-flight refusal, and when the SlotStore fails
// an error wrapping ErrStore, and what d spent is to go back (finish).
func (m *Middleware) holdSlot(r *http.Request, d *decision) (func(), Result, error) {
	f, key, occ := m.cfg.inflight, d.key, &d.lim.occ
	if m.cfg.Slots == nil {
		if f.acquire(key) {
			occ.InFlight.Add(1)
			return func() { occ.InFlight.Add(-1); f.release(key) }, d.res, nil
		}
	} else {
		held, ok, err := f.acquireShared(r.Context(), m.cfg.Slots, m.cfg.SlotLease, key)
		if err != nil {
			d.back = d.res
			return nil, Result{}, fmt.Errorf("%w: in-flight slots: %w", ErrStore, err)
		}
		if ok {
			occ.InFlight.Add(1)
			return func() { occ.InFlight.Add(-1); held.release() }, d.res, nil
		}
	}
	d.back = d.res
	return nil, f.refused, nil
}

// undecided observes and answers a request that failed before its
// decision (the client lists, MiddlewareOptions.Skip) because of err.
func (m *Middleware) undecided(w http.ResponseWriter, r *http.Request, err error) {
	if m.cfg.Observe != nil {
		m.cfg.Observe(r, Event{Limiter: m.limiter, Err: err})
	}
	m.fail(w, r, err)
}

// fail answers a request that could not be decided because of err.
func (m *Middleware) fail(w http.ResponseWriter, r *http.Request, err error) {
	if m.cfg.customOnError {
		m.cfg.errors.noteRefusal(r, err)
	}
	m.cfg.OnError(w, r, err)
}
