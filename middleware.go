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
)

// Middleware is the HTTP side of a [Limiter], shared by every framework
// adapter: it finds the key and cost of a request, takes a decision, writes
// the rate-limit header fields and, when the request may not proceed, the
// whole answer. Adapters (package nethttp, and the ginlimit and echolimit
// modules) only plumb a framework's request and response into
// [Middleware.Handle], so every framework behaves the same. A Middleware is safe for concurrent use.
type Middleware struct {
	limiter *Limiter
	key     KeyFunc
	cfg     config
	warner  Warner     // the Observer, if it is one
	keys    *dominance // nil when warnings are off
}

// NewMiddleware returns a Middleware that limits requests with l, keyed by
// key. Options change the cost of a request, the header fields, and how
// refusals and errors are answered.
func NewMiddleware(l *Limiter, key KeyFunc, opts ...Option) (*Middleware, error) {
	if l == nil {
		return nil, errors.New("ratelimit: NewMiddleware: nil limiter")
	}
	if key == nil {
		return nil, errors.New("ratelimit: NewMiddleware: nil key function")
	}
	m := &Middleware{limiter: l, key: key, cfg: config{
		headers: HeadersIETF,
		deny:    denyProblem,
		onError: DefaultErrorHandler,
		wait:    sleep,
	}}
	for _, opt := range opts {
		if err := opt(&m.cfg); err != nil {
			return nil, err
		}
	}
	m.warner, _ = m.cfg.observer.(Warner)
	if !m.cfg.quiet.off(WarnOneKey) {
		m.keys = new(dominance)
	}
	if !m.cfg.quiet.off(WarnSharedPolicyName) {
		l.checkSharedOnce(m.warner)
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
// With WithCountIf, the cost is taken before next runs, so a spent budget
// refuses the request, and given back after it returns if its status does
// not count. With WithMaxInFlight, the request holds a slot while next runs,
// released when next returns or panics.
func (m *Middleware) Handle(w http.ResponseWriter, r *http.Request, next func() (status int)) {
	if m.cfg.skip != nil && m.cfg.skip(r) {
		next()
		return
	}
	var start time.Time
	if m.cfg.observer != nil {
		start = time.Now()
	}
	lim, key, cost, res, err := m.decide(r)
	if errors.Is(err, errExempt) {
		next()
		return
	}
	var release func()
	policies := lim.names
	if err == nil && res.Allowed {
		// An in-flight refusal is a refusal: take the slot before the
		// decision is observed and answered.
		if release, res, err = m.acquire(r, lim, key, cost, res); release != nil {
			defer release()
		} else if err == nil && !res.Allowed {
			policies = res.Violated() // the in-flight limit's alone
		}
	}
	if m.cfg.observer != nil {
		m.cfg.observer.Observe(r, Event{Policies: policies, KeyHash: keyHash(key), Result: res, Err: err, Elapsed: time.Since(start)})
	}
	if err != nil {
		m.cfg.onError(w, r, err)
		return
	}
	if m.keys != nil {
		m.keys.see(key, m.warner)
	}
	if !res.Allowed && m.cfg.jitter > 0 {
		j := time.Duration(rand.Int64N(int64(m.cfg.jitter)))
		res.RetryAfter += j
		res.ResetAfter = max(res.ResetAfter, res.RetryAfter)
	}
	m.writeHeaders(w.Header(), lim, res)
	if !res.Allowed {
		m.refuse(w, r, res)
		return
	}
	if res.Delay > 0 {
		if err := m.cfg.wait(r.Context(), res.Delay); err != nil {
			m.cfg.onError(w, r, fmt.Errorf("%w: %w", ErrWaitAbandoned, err))
			return
		}
	}
	if m.cfg.countIf == nil {
		next()
		return
	}
	counted := false
	defer func() {
		if !counted { // next did not return normally, or its status does not count
			lim.giveBack(r.Context(), key, cost, res)
		}
	}()
	counted = m.cfg.countIf(next())
}

// acquire takes an in-flight slot for an allowed request (WithMaxInFlight)
// and returns the function that releases it. When no slot is free it gives
// back what the decision spent and returns the in-flight refusal; when the
// SlotStore fails, an error wrapping ErrStore.
func (m *Middleware) acquire(r *http.Request, lim *Limiter, key string, cost int64, res Result) (func(), Result, error) {
	f := m.cfg.inflight
	if f == nil {
		return nil, res, nil
	}
	if m.cfg.slots == nil {
		if f.acquire(key) {
			return func() { f.release(key) }, res, nil
		}
	} else {
		held, ok, err := f.acquireShared(r.Context(), m.cfg.slots, m.cfg.lease, key)
		if err != nil {
			lim.giveBack(r.Context(), key, cost, res)
			return nil, Result{}, fmt.Errorf("%w: in-flight slots: %w", ErrStore, err)
		}
		if ok {
			return func() { f.releaseShared(r.Context(), m.cfg.slots, held) }, res, nil
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
	case m.cfg.dryRunHeaders && res.Policies() != nil:
		writeHeaders(h, m.cfg.headers, res.Policies()[binding(res.Policies(), lim.all)], lim.fields[1])
	case len(lim.enforce) == 0 && !m.cfg.dryRunHeaders:
		return
	default:
		writeHeaders(h, m.cfg.headers, res, lim.fields[0])
	}
	if m.cfg.inflight != nil {
		m.cfg.inflight.list(h, m.cfg.headers)
	}
}

// refuse answers a refused request: Retry-After, then the deny handler.
func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, res Result) {
	w.Header().Set("Retry-After", strconv.FormatInt(retryAfterSeconds(res.RetryAfter), 10))
	m.cfg.deny(w, r, res)
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
	if m.cfg.pick != nil {
		if picked := m.cfg.pick(r); picked != nil {
			lim = picked
			if !m.cfg.quiet.off(WarnSharedPolicyName) {
				lim.checkSharedOnce(m.warner) // the limiters it picks, the first time each
			}
		}
	}
	if key, err = m.key(r); err != nil {
		return lim, "", 0, Result{}, err
	}
	if m.cfg.exempt[key] {
		return lim, key, 0, Result{}, errExempt
	}
	cost = 1
	if m.cfg.cost != nil {
		if cost, err = m.cfg.cost(r); err != nil {
			return lim, key, 0, Result{}, errors.Join(ErrInvalidCost, err)
		}
	}
	res, err = lim.Take(r.Context(), key, cost)
	return lim, key, cost, res, err
}

// errExempt tells Handle that the request's key is exempt.
var errExempt = errors.New("ratelimit: exempt key")

// ErrPanic wraps the value of a panic in a key, cost or limiter-choosing
// function; the default error handler answers it with 500.
var ErrPanic = errors.New("ratelimit: panic while deciding")

// ErrInvalidCost wraps an error returned by the cost function.
var ErrInvalidCost = errors.New("ratelimit: cost function failed")

// ErrWaitAbandoned is reported to the error handler when a request's
// context ends while it waits for its turn in a shaping queue.
var ErrWaitAbandoned = errors.New("ratelimit: request left the queue before its turn")

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
// problem body that never contains the error's text:
//   - ErrMissingKey (no credentials): 401 Unauthorized;
//   - ErrNoClientIP, ErrInvalidCost, ErrNegativeCost, ErrCostExceedsBurst:
//     400 Bad Request;
//   - ErrStore (the store failed, or a FailClosed [Failover] refuses while
//     it does): 503 with Retry-After: 1 and the temporary-reduced-capacity
//     problem type;
//   - ErrWaitAbandoned: 503 with Retry-After: 1;
//   - anything else: 500 Internal Server Error.
//
// Errors answered with a 5xx status are logged with slog.Default, except
// ErrWaitAbandoned (the client left) and ErrStoreUnavailable (a Failover
// logs once when the store fails, not once per request). Other store
// failures are logged at most once every 10 seconds per process, with the
// number left unlogged since the last line ("suppressed"): during an
// outage every request fails the same way.
func DefaultErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	status, typ, title := http.StatusInternalServerError, "about:blank", "Internal Server Error"
	switch {
	case errors.Is(err, ErrMissingKey):
		status, title = http.StatusUnauthorized, "Missing Credentials"
	case errors.Is(err, ErrCostExceedsBurst):
		status, title = http.StatusBadRequest, "Request Cost Exceeds Capacity"
	case errors.Is(err, ErrNoClientIP), errors.Is(err, ErrInvalidCost), errors.Is(err, ErrNegativeCost):
		status, title = http.StatusBadRequest, "Bad Request"
	case errors.Is(err, ErrStore):
		status, typ, title = http.StatusServiceUnavailable, problemReducedCapacity, "Temporary Reduced Capacity"
		w.Header().Set("Retry-After", "1")
	case errors.Is(err, ErrWaitAbandoned):
		status, title = http.StatusServiceUnavailable, "Service Unavailable"
		w.Header().Set("Retry-After", "1")
	}
	if status >= 500 && !errors.Is(err, ErrWaitAbandoned) && !errors.Is(err, ErrStoreUnavailable) {
		args := []any{"method", r.Method, "path", r.URL.Path, "status", status, "err", err}
		suppressed, log := int64(0), true
		if errors.Is(err, ErrStore) {
			suppressed, log = storeErrorLines.take(time.Now())
		}
		if log {
			if suppressed > 0 {
				args = append(args, "suppressed", suppressed)
			}
			slog.Default().ErrorContext(r.Context(), "ratelimit: cannot decide request", args...)
		}
	}
	writeProblem(w, status, typ, title, "", nil)
}

// storeErrorLines spaces out DefaultErrorHandler's log lines about store
// failures.
var storeErrorLines = logSpacing{every: 10 * time.Second}

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

// writeProblem writes an RFC 9457 problem body. Every string it is given is
// a constant or a validated policy name, so it needs no JSON escaping.
func writeProblem(w http.ResponseWriter, status int, typ, title, detail string, violated []string) {
	b := make([]byte, 0, 256)
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","title":"`...)
	b = append(b, title...)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	if detail != "" {
		b = append(b, `,"detail":"`...)
		b = append(b, detail...)
		b = append(b, '"')
	}
	if len(violated) > 0 {
		b = append(b, `,"violated-policies":[`...)
		for i, name := range violated {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, name...)
			b = append(b, '"')
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

// CountsResponses reports whether the status that Handle's next returns
// matters (WithCountIf). Adapters that must wrap the response writer to
// learn the status can skip that work when it does not.
func (m *Middleware) CountsResponses() bool { return m.cfg.countIf != nil }
