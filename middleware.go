package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tokenfair/ratelimit/internal/clientkey"
)

// Middleware is the HTTP side of a [Limiter], shared by every framework
// adapter: it finds the key and cost of a request, takes a decision, writes
// the rate-limit header fields and, when the request may not proceed, the
// whole answer. Adapters (package nethttp, and the ginlimit and echolimit
// modules) only plumb a framework's request and response into
// [Middleware.Handle], so every framework behaves the same. A Middleware is
// safe for concurrent use.
type Middleware struct {
	limiter *Limiter
	key     KeyFunc
	cfg     config
	keys    *dominance  // nil when the one-key warning is off
	limits  *limitsSeen // nil when the shared-policy-name warning is off
}

// NewMiddleware returns a Middleware that limits requests with l, keyed by
// key and configured by opts (nil for the defaults). It returns an error,
// naming the field and value at fault, for a nil limiter or key function
// or invalid options.
func NewMiddleware(l *Limiter, key KeyFunc, opts *Options) (*Middleware, error) {
	if l == nil {
		return nil, errors.New("ratelimit: NewMiddleware: nil limiter")
	}
	if key == nil {
		return nil, errors.New("ratelimit: NewMiddleware: nil key function")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	m := &Middleware{limiter: l, key: key, cfg: cfg}
	if !cfg.quiet.off(warnOneKey) {
		m.keys = new(dominance)
	}
	if !cfg.quiet.off(warnSharedPolicyName) {
		m.limits = new(limitsSeen)
		m.limits.check(l, cfg.Logger)
	}
	return m, nil
}

// Handle runs r through the limiter and, when it may proceed, calls next,
// which must run the rest of the chain and return the response's status
// code. It is the one entry point of every framework adapter.
//
// Handle sets the rate-limit header fields on w. When the request is
// refused, or cannot be decided, Handle writes the whole response (through
// the deny or the error handler) and next never runs. A panic in the key or
// cost function is answered like an error (500 by default).
//
// A request admitted by a shaping policy (LeakyShape) with a Delay is held
// until its turn. If the request's context ends first (the client went
// away, or a server deadline passed), Handle stops waiting and answers
// through the error handler with ErrWaitAbandoned; next never runs. The
// request's place in the queue stays spent: the requests behind it keep
// their times, and the slot is not given back.
//
// With Options.CountIf, the cost is taken before next runs, so a spent
// budget refuses the request, and given back after it returns if its status
// does not count. With Options.MaxInFlight, the request holds a slot while
// next runs, released when next returns or panics.
func (m *Middleware) Handle(w http.ResponseWriter, r *http.Request, next func() (status int)) {
	if m.cfg.Skip != nil {
		skip, err := m.skip(r)
		if err != nil {
			m.cfg.OnError(w, r, err)
			return
		}
		if skip {
			next()
			return
		}
	}
	var start time.Time
	if m.cfg.Observe != nil {
		start = time.Now()
	}
	lim, key, cost, res, err := m.decide(r)
	var release func()
	if err == nil && res.Allowed {
		// An in-flight refusal is a refusal: take the slot before the
		// decision is observed and answered.
		if release, res, err = m.acquire(r, lim, key, cost, res); release != nil {
			defer release()
		}
	}
	if m.cfg.Observe != nil {
		m.cfg.Observe(r, Event{Limiter: lim, KeyHash: keyHash(key), Result: res, Err: err, Elapsed: time.Since(start)})
	}
	if err != nil {
		if m.cfg.ownOnError {
			m.cfg.errors.noteRefusal(r, err)
		}
		m.cfg.OnError(w, r, err)
		return
	}
	if m.keys != nil {
		m.keys.see(key, m.cfg.Logger)
	}
	if !res.Allowed && m.cfg.RetryJitter > 0 {
		j := time.Duration(rand.Int64N(int64(m.cfg.RetryJitter)))
		res.RetryAfter += j
		res.ResetAfter = max(res.ResetAfter, res.RetryAfter)
	}
	m.writeHeaders(w.Header(), lim, res)
	if !res.Allowed {
		m.refuse(w, r, res)
		return
	}
	if res.Delay > 0 {
		if err := sleep(r.Context(), res.Delay); err != nil {
			m.cfg.OnError(w, r, fmt.Errorf("%w: %w", ErrWaitAbandoned, err))
			return
		}
	}
	if m.cfg.CountIf == nil {
		next()
		return
	}
	counted := false
	defer func() {
		if !counted { // next did not return normally, or its status does not count
			lim.giveBack(r.Context(), key, cost, res)
		}
	}()
	counted = m.cfg.CountIf(next())
}

// acquire takes an in-flight slot for an allowed request (MaxInFlight)
// and returns the function that releases it. When no slot is free it gives
// back what the decision spent and returns the in-flight refusal; when the
// SlotStore fails, an error wrapping ErrStore.
func (m *Middleware) acquire(r *http.Request, lim *Limiter, key string, cost int64, res Result) (func(), Result, error) {
	f := m.cfg.inflight
	if f == nil {
		return nil, res, nil
	}
	if m.cfg.Slots == nil {
		if f.acquire(key) {
			return func() { f.release(key) }, res, nil
		}
	} else {
		held, ok, err := f.acquireShared(r.Context(), m.cfg.Slots, m.cfg.SlotLease, key)
		if err != nil {
			lim.giveBack(r.Context(), key, cost, res)
			return nil, Result{}, fmt.Errorf("%w: in-flight slots: %w", ErrStore, err)
		}
		if ok {
			return func() { f.releaseShared(r.Context(), m.cfg.Slots, held) }, res, nil
		}
	}
	lim.giveBack(r.Context(), key, cost, res)
	return nil, f.refused, nil
}

// writeHeaders writes the rate-limit header fields of res, decided by lim:
// none for a degraded decision, or when every policy is dry-run and hidden.
func (m *Middleware) writeHeaders(h http.Header, lim *Limiter, res Result) {
	switch {
	case res.Degraded:
		return
	case m.cfg.DryRunHeaders && res.Results() != nil:
		b := res.Results()[binding(res.Results(), lim.all)]
		writeHeaders(h, m.cfg.Headers, b, lim.fields[1], lim.quotasOf(b.Policy))
	case len(lim.enforce) == 0 && !m.cfg.DryRunHeaders:
		return
	default:
		writeHeaders(h, m.cfg.Headers, res, lim.fields[0], lim.quotasOf(res.Policy))
	}
	if m.cfg.inflight != nil {
		m.cfg.inflight.list(h, m.cfg.Headers)
	}
}

// refuse answers a refused request: Retry-After, then the deny handler.
func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, res Result) {
	w.Header()["Retry-After"] = intField(retryAfterSeconds(res.RetryAfter))
	m.cfg.OnDeny(w, r, res)
}

// skip reports whether Options.Skip exempts r; a panic in it becomes an
// error wrapping ErrPanic.
func (m *Middleware) skip(r *http.Request) (skip bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: in Skip: %v", ErrPanic, p)
		}
	}()
	return m.cfg.Skip(r), nil
}

// decide finds the limiter, key and cost of r and takes the decision. A
// panic in the key or cost function becomes an error wrapping ErrPanic.
func (m *Middleware) decide(r *http.Request) (lim *Limiter, key string, cost int64, res Result, err error) {
	lim = m.limiter
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrPanic, p)
		}
	}()
	if m.cfg.LimiterFor != nil {
		if picked := m.cfg.LimiterFor(r); picked != nil {
			lim = picked
			if m.limits != nil {
				m.limits.check(lim, m.cfg.Logger) // the limiters it picks, the first time each
			}
		}
	}
	if key, err = m.key(r); err != nil {
		return lim, "", 0, Result{}, err
	}
	if key == "" {
		return lim, "", 0, Result{}, errEmptyKey
	}
	cost = 1
	if m.cfg.Cost != nil {
		if cost, err = m.cfg.Cost(r); err != nil {
			return lim, key, 0, Result{}, &clientkey.Error{Err: fmt.Errorf("%w: the cost function failed: %w", ErrBadRequest, err),
				Kind: clientkey.KindCost, Detail: "the cost function failed"}
		}
		if cost < 0 {
			detail := "the request's cost, " + strconv.FormatInt(cost, 10) + ", is negative"
			return lim, key, 0, Result{}, &clientkey.Error{Err: fmt.Errorf("%w: negative cost %d", ErrBadRequest, cost),
				Kind: clientkey.KindCost, Detail: detail}
		}
	}
	res, err = lim.Take(r.Context(), key, cost)
	if err != nil && errors.Is(err, errCostExceedsBurst) {
		err = costAboveBurst(lim, cost, err)
	}
	return lim, key, cost, res, err
}

// errEmptyKey is the refusal of an empty key from the key function.
var errEmptyKey = &clientkey.Error{Err: fmt.Errorf("%w: the key function returned an empty key", ErrMissingKey),
	Kind: clientkey.KindEmptyKey, Detail: "the key function returned an empty key"}

// costAboveBurst describes err, lim's refusal of a cost above the burst of
// one of its policies, with the first such policy, as Take checks them.
func costAboveBurst(lim *Limiter, cost int64, err error) error {
	for _, i := range lim.enforce {
		if p := &lim.policies[i]; cost > p.Limit.burst {
			detail := fmt.Sprintf("the request's cost, %d, is above the burst of policy %q, %d", cost, p.Name, p.Limit.burst)
			return &clientkey.Error{Err: err, Kind: clientkey.KindCostAboveBurst, Detail: detail}
		}
	}
	return err
}

// sleep waits for d or until ctx ends, and returns ctx's error in the latter
// case.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func denyProblem(w http.ResponseWriter, _ *http.Request, res Result) {
	writeProblem(w, http.StatusTooManyRequests, problemQuotaExceeded, "Quota Exceeded",
		"Too many requests; retry after "+strconv.FormatInt(retryAfterSeconds(res.RetryAfter), 10)+" s.",
		res.Violated())
}

// DefaultErrorHandler answers a request that could not be decided with a
// problem body that never contains the error's text, but a "detail" that
// says what was wrong without quoting any header value, key or secret: the
// Detail of the refusals of this module's key and cost checks ("the request
// carries no X-API-Key header"), or a generic sentence for other errors.
//   - ErrMissingKey: 401 Unauthorized, with the WWW-Authenticate challenge
//     of the key function that failed (KeyByAPIKey: ApiKey in="header",
//     name="X-API-Key"), or Bearer;
//   - ErrBadRequest: 400 Bad Request;
//   - ErrStore: 503 with Retry-After: 1 and the temporary-reduced-capacity
//     problem type;
//   - ErrWaitAbandoned: 503 with Retry-After: 1;
//   - anything else (ErrPanic included): 500 Internal Server Error.
//
// Errors are logged with slog.Default. The first 400 or 401 of each kind
// (a missing key, an unusable client address, a bad cost, ...) in the
// process is logged at the warning level, with the "refusal" kind, the
// detail, the method and the path, so that a misconfigured key function is
// seen; later ones at the debug level. 500s are logged at the error level;
// ErrWaitAbandoned (the client left) is not logged. Store failures are
// logged at most once every 10 seconds, with the number left unlogged
// since the last line ("suppressed"): during an outage every request fails
// the same way. (A Middleware whose Options.OnError is nil answers the same
// way, logging to Options.Logger, the first refusal of each kind of that
// Middleware, and spacing its own lines.)
func DefaultErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	errorAnswers{storeLines: &defaultStoreLines, refusals: &defaultRefusals}.answer(w, r, err)
}

// defaultStoreLines spaces out DefaultErrorHandler's log lines about store
// failures, and defaultRefusals notes the kinds of refusal it has logged.
var (
	defaultStoreLines = logSpacing{every: storeLinesEvery}
	defaultRefusals   refusals
)

// storeLinesEvery is the least time between two log lines about store
// failures.
const storeLinesEvery = 10 * time.Second

// errorAnswers is DefaultErrorHandler with its own logger, challenge and
// log state.
type errorAnswers struct {
	log        *slog.Logger // nil: slog.Default() at the time of the line
	challenge  string       // of a 401, instead of the error's; "": the error's
	storeLines *logSpacing
	refusals   *refusals
}

// problem is how DefaultErrorHandler answers an error.
type problem struct {
	status             int
	typ, title, detail string
	challenge          string         // of a 401
	kind               clientkey.Kind // of a 400 or 401
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
	case errors.Is(err, ErrWaitAbandoned):
		return problem{status: http.StatusServiceUnavailable, typ: "about:blank", title: "Service Unavailable",
			detail: "the request left the queue before its turn", retryAfter: true}
	}
	return problem{status: http.StatusInternalServerError, typ: "about:blank", title: "Internal Server Error",
		detail: "the rate limit could not be checked"}
}

// answer is DefaultErrorHandler, logging and answering as a says.
func (a errorAnswers) answer(w http.ResponseWriter, r *http.Request, err error) {
	p := describe(err)
	log := a.logger()
	switch {
	case p.status < 500:
		a.logRefusal(log, r, err, p)
	case !errors.Is(err, ErrWaitAbandoned):
		args := []any{"method", r.Method, "path", r.URL.Path, "status", p.status, "err", err}
		suppressed, ok := int64(0), true
		if errors.Is(err, ErrStore) {
			suppressed, ok = a.storeLines.take(time.Now())
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
// if it is the first of its kind, with the detail that quotes no value,
// else at the debug level, with the error, which may quote the value at
// fault (a forwarding header's entry, clipped), never an API key or user ID.
func (a errorAnswers) logRefusal(log *slog.Logger, r *http.Request, err error, p problem) {
	if a.refusals.first(p.kind) {
		log.WarnContext(r.Context(), "ratelimit: refused a request that cannot be limited (the first of its kind)",
			"refusal", p.kind.String(), "status", p.status, "detail", p.detail, "method", r.Method, "path", r.URL.Path)
		return
	}
	log.DebugContext(r.Context(), "ratelimit: cannot decide request", "method", r.Method, "path", r.URL.Path, "status", p.status, "err", err)
}

// noteRefusal logs err, for a Middleware whose own OnError answers it, if
// it is the first refusal of its kind.
func (a errorAnswers) noteRefusal(r *http.Request, err error) {
	p := describe(err)
	if p.status >= 500 || !a.refusals.first(p.kind) {
		return
	}
	a.logger().WarnContext(r.Context(), "ratelimit: refused a request that cannot be limited (the first of its kind)",
		"refusal", p.kind.String(), "status", p.status, "detail", p.detail, "method", r.Method, "path", r.URL.Path)
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

// take reports whether a line may be logged at now, and how many were
// suppressed since the last one.
func (l *logSpacing) take(now time.Time) (suppressed int64, ok bool) {
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
func writeProblem(w http.ResponseWriter, status int, typ, title, detail string, violated []string) {
	b := make([]byte, 0, 256)
	b = append(b, `{"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"title":`...)
	b = appendJSONString(b, title)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	if detail != "" {
		b = append(b, `,"detail":`...)
		b = appendJSONString(b, detail)
	}
	if len(violated) > 0 {
		b = append(b, `,"violated-policies":[`...)
		for i, name := range violated {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, name)
		}
		b = append(b, ']')
	}
	b = append(b, "}\n"...)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// appendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it: quotes, backslashes, control characters, <, >, &, U+2028
// and U+2029, and invalid UTF-8 as U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// CountsResponses reports whether the status that Handle's next returns
// matters (Options.CountIf). Adapters that must wrap the response writer to
// learn the status can skip that work when it does not.
func (m *Middleware) CountsResponses() bool { return m.cfg.CountIf != nil }
