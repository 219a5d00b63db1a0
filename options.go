package ratelimit

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// MiddlewareOptions configures a [Middleware]. Every field is optional: the zero
// value, or a nil *MiddlewareOptions, is the documented default of each.
type MiddlewareOptions struct {
	// Cost tells how many tokens a request costs, for example the number
	// of addresses in a batch request; an error, or a cost below 1, is
	// answered with 400 Bad Request (exempt free requests with Skip).
	// Default: every request costs 1.
	Cost func(r *http.Request) (int64, error)
	// Headers selects the rate-limit header fields. Default: HeadersIETF.
	Headers HeaderFormat
	// DryRunHeaders makes the header fields describe the dry-run policies
	// too, as if they were enforced, so that clients see a limit coming:
	// RateLimit-Policy lists them on every answer, and an allowed
	// request's RateLimit may be a dry-run policy's (a refusal's is the
	// refusing policy's, whose t is Retry-After). Default: dry-run
	// policies are invisible to clients.
	DryRunHeaders bool
	// OnDeny answers a refused request; the rate-limit header fields and
	// Retry-After are already set. Default: 429 Too Many Requests with
	// Cache-Control: no-store and an application/problem+json body of the
	// IETF quota-exceeded type that names the violated policies.
	OnDeny func(w http.ResponseWriter, r *http.Request, res Result)
	// OnError answers a request that could not be decided. Default: a
	// problem body that never holds the error's text, with 401 for
	// ErrMissingKey, 400 for ErrBadRequest, 503 and Retry-After: 1 for
	// ErrStore and ErrWaitAbandoned, else 500 (a panic), logged to Logger
	// (docs/http.md). Whatever OnError is, the
	// first refusal of each kind (a missing key, an unusable client
	// address, a bad cost, ...) is logged to Logger at the warning level,
	// so that a misconfigured key function cannot refuse every request
	// unseen.
	OnError func(w http.ResponseWriter, r *http.Request, err error)
	// Challenge is the WWW-Authenticate field of the default error
	// handler's 401 answers, which RFC 9110 requires, such as
	// `Bearer realm="api"`. Default: the challenge of the key function that
	// found no identity: `ApiKey in="header", name="X-API-Key"` for
	// KeyByAPIKey("X-API-Key") (Bearer for the Authorization header), and
	// Bearer for KeyByContextValue and any other key function.
	Challenge string
	// RetryJitter adds a random wait in [0, RetryJitter) to what refused
	// clients are told (Retry-After and the reset), so that clients refused
	// together do not all come back at once. It is at most an hour.
	// Default: none.
	RetryJitter time.Duration
	// LimiterFor chooses the limiter of each request, for limits that
	// differ by route or plan; nil from it means the Middleware's own.
	// Give each limiter's policies their own names, since names keep
	// buckets apart in a shared store. Default: the Middleware's limiter.
	LimiterFor func(r *http.Request) *Limiter
	// Skip exempts the requests for which it returns true (health checks,
	// internal callers): they are neither limited nor counted and get no
	// rate-limit header fields. Default: none is skipped.
	Skip func(r *http.Request) bool
	// Block and Safe list clients by address: CIDR prefixes such as
	// "203.0.113.0/24" or single addresses such as "2001:db8::7", written
	// as in IPOptions.TrustedProxies (masked, IPv4-mapped IPv6 prefixes
	// taken in their IPv4 form, empty entries skipped). A request from a
	// blocked client is answered 403 Forbidden with an
	// application/problem+json body before anything else, Skip included:
	// it reaches no store and gets no rate-limit header fields. A request
	// from a safe client is treated as one that Skip exempts. A client in
	// both lists is blocked. The client is found as KeyByIP(ClientIP)
	// finds it, whatever the key function; a request whose client cannot
	// be found is answered as KeyByIP's error (400 by default). Default:
	// no list.
	Block, Safe []string
	// ClientIP is how Block and Safe find the client of a request, as
	// KeyByIP(ClientIP) would, whatever the key function. Behind proxies,
	// give it the TrustedProxies and Header that KeyByIP has, or would
	// have (with an API key, say): without them the proxy is taken for
	// the client. Gin's and Echo's own proxy settings are not used. Its
	// IPv6Prefix is not used; its warnings go to its Logger, or else to
	// Logger. Default: nil, the TCP peer (RemoteAddr).
	ClientIP *IPOptions
	// CountIf makes only some responses spend the budget: a request is
	// still refused when the budget is spent, but after the handler
	// returns, its cost is given back (what its take still costs the
	// bucket: see [RefundStore]) unless CountIf(status) is true. A
	// response that has begun counts by its status, even if its handler
	// then panics (a client that hung up mid-body); one that panics before
	// writing anything does not count. The login guard counts failures
	// only: func(status int) bool { return status >= 400 }. Default: every
	// request counts.
	CountIf func(status int) bool
	// MaxInFlight and MaxInFlightTotal limit how many requests run at once:
	// per key and in all. A request over either limit is refused with 429,
	// Retry-After: 1 and the policy "inflight", and what it took from the
	// rate limits is given back. A slot is held until the handler returns,
	// including while the request waits in a LeakyShape queue. Default: 0,
	// no limit.
	MaxInFlight, MaxInFlightTotal int
	// MaxQueued bounds the requests that wait in shaping queues
	// (LeakyShape delays) at once, across all keys of the Middleware: a
	// request that would wait while MaxQueued others do is refused at once
	// with 429 and Retry-After, the wait it would have had, and what it
	// took is given back. Each waiting request holds a goroutine and a
	// connection, so without a bound many keys could park the server.
	// Default: 0, which means 256 (a quarter of the usual limit of 1024
	// open files); a negative value removes the bound.
	MaxQueued int
	// Slots shares the in-flight slots among instances. A failure of Slots
	// is answered like a store failure. Default: slots are kept in the
	// process, so each instance allows its own MaxInFlight.
	Slots SlotStore
	// SlotLease is how long a slot of Slots is leased. A running request
	// renews its slot every third of SlotLease, so that it keeps it however
	// long it runs, and the slot of an instance that died frees itself
	// within SlotLease. Required, and at least 1 ms, with Slots.
	SlotLease time.Duration
	// SlotName names this Middleware's slots in Slots: the instances of one
	// middleware share its slots by giving it the same name, and different
	// middlewares keep theirs apart by giving different names. 1 to 64
	// characters from [A-Za-z0-9._-]. Required with Slots.
	SlotName string
	// ResultInContext puts each admitted request's Result in the
	// context of the request that next receives, for ResultFrom. It
	// costs a new request and context (a few allocations) per request.
	// Default: false.
	ResultInContext bool
	// Observe is told about every request the Middleware decides, or fails
	// to decide, for metrics and logs (the metrics module's Metrics.Observe
	// is one). It runs on the request path before the response is written,
	// so it must be fast and safe for concurrent use. Default: none, and no
	// work is done for it, not even reading the clock.
	Observe func(r *http.Request, ev Event)
	// Logger receives the default error handler's lines and the
	// misconfiguration warnings, each logged once with the attribute
	// "warning" naming its kind: "one-key" (nearly all requests have the
	// same key, usually a proxy's address) and "shared-policy-name" (the
	// Middleware's limiters use one store and one policy name with
	// different limits). Default: slog.Default(), as it is when a line is
	// logged.
	Logger *slog.Logger
	// Quiet turns off the warnings the Middleware logs; default false.
	// To drop one kind only, filter on the "warning" attribute in Logger's
	// slog.Handler.
	Quiet bool
}

// config is the validated form of MiddlewareOptions.
type config struct {
	MiddlewareOptions
	inflight   *inflight
	maxQueued  int64        // MiddlewareOptions.MaxQueued with its default; < 0: no bound
	lists      *addrLists   // nil without Block and Safe
	errors     errorAnswers // the default error handler, and the first refusals
	ownOnError bool         // OnError is the caller's
}

// maxRetryJitter bounds MiddlewareOptions.RetryJitter. An hour spreads the return of
// any crowd of refused clients; a longer jitter would tell them to stay
// away longer than any limit asks, which is a misconfiguration.
const maxRetryJitter = time.Hour

func newConfig(o *MiddlewareOptions) (config, error) {
	var c config
	if o != nil {
		c.MiddlewareOptions = *o
	}
	if c.OnDeny == nil {
		c.OnDeny = denyProblem
	}
	c.errors = errorAnswers{log: c.Logger, challenge: c.Challenge, storeLines: &logSpacing{every: storeLinesEvery}, refusals: new(refusals)}
	if c.OnError == nil {
		c.OnError = c.errors.answer
	} else {
		c.ownOnError = true
	}
	switch {
	case c.Headers > HeadersNone:
		return c, fmt.Errorf("ratelimit: MiddlewareOptions.Headers: unknown format %d", c.Headers)
	case c.RetryJitter < 0 || c.RetryJitter > maxRetryJitter:
		return c, fmt.Errorf("ratelimit: MiddlewareOptions.RetryJitter %v: want a duration from 0 to %v", c.RetryJitter, maxRetryJitter)
	case c.MaxInFlight < 0 || c.MaxInFlightTotal < 0:
		return c, fmt.Errorf("ratelimit: MiddlewareOptions.MaxInFlight %d, MaxInFlightTotal %d: want limits ≥ 0", c.MaxInFlight, c.MaxInFlightTotal)
	case c.Slots != nil && c.SlotLease < time.Millisecond:
		return c, fmt.Errorf("ratelimit: MiddlewareOptions.SlotLease %v: want a lease of at least 1ms with Slots", c.SlotLease)
	case !validFieldValue(c.Challenge):
		return c, fmt.Errorf("ratelimit: MiddlewareOptions.Challenge %q: want a header field value, without control characters", c.Challenge)
	case c.Slots != nil && c.MaxInFlight == 0 && c.MaxInFlightTotal == 0:
		return c, fmt.Errorf("ratelimit: MiddlewareOptions.Slots without MaxInFlight or MaxInFlightTotal")
	case c.Slots != nil && !validName(c.SlotName):
		return c, fmt.Errorf("ratelimit: MiddlewareOptions.SlotName %q: want 1 to 64 characters from [A-Za-z0-9._-] with Slots, the same on every instance", c.SlotName)
	case c.Slots == nil && c.SlotName != "":
		return c, fmt.Errorf("ratelimit: MiddlewareOptions.SlotName %q without Slots", c.SlotName)
	}
	var err error
	if c.lists, err = newAddrLists(&c.MiddlewareOptions); err != nil {
		return c, err
	}
	switch c.maxQueued = int64(c.MaxQueued); {
	case c.maxQueued == 0:
		c.maxQueued = defaultMaxQueued
	case c.maxQueued < 0:
		c.maxQueued = -1
	}
	if c.MaxInFlight > 0 || c.MaxInFlightTotal > 0 {
		c.inflight = newInflight(c.MaxInFlight, c.MaxInFlightTotal, c.SlotName)
	}
	return c, nil
}

// validFieldValue reports whether s may be an HTTP field value: visible
// characters, spaces and tabs, with none at either end.
func validFieldValue(s string) bool {
	for _, c := range []byte(s) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return s == strings.TrimSpace(s)
}
