package ratelimit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// MiddlewareOptions configures a [Middleware]. Every field is optional: the
// zero value, or a nil *MiddlewareOptions, is the default of each.
// docs/policies.md and docs/http.md show them at work.
type MiddlewareOptions struct {
	// Cost returns what a request costs policies of Unit "requests"; an
	// error, or a cost below 1 or above a burst, gets 400. Default: 1.
	Cost func(r *http.Request) (int64, error)
	// Costs returns, by unit, what a request reserves of other units: the
	// application's, settled with Settle, or an estimate of "content-bytes",
	// which the response settles. Default: each unit reserves 1.
	Costs map[string]func(r *http.Request) (int64, error)
	// Headers selects the rate-limit header fields. Default: HeadersIETF.
	Headers HeaderFormat
	// DryRunHeaders shows dry-run policies in the header fields as if
	// enforced. Default: clients never see them.
	DryRunHeaders bool
	// OnDeny answers a refused request, its header fields and Retry-After
	// set. Default: 429 with a problem body naming the refusing policies.
	OnDeny func(w http.ResponseWriter, r *http.Request, res Result)
	// OnError answers a request that could not be decided. Default: a
	// problem body without the error's text: 401 for ErrMissingKey, 400 for
	// ErrBadRequest, 503 with Retry-After: 1 for ErrStore and an abandoned
	// LeakyShape wait, else 500. The first 400 or 401 of each kind, and
	// of a misconfiguration's 500s, is logged whatever OnError is.
	OnError func(w http.ResponseWriter, r *http.Request, err error)
	// Challenge is the WWW-Authenticate field of the default 401 answers.
	// Default: the key function's (ApiKey for KeyByAPIKey), else Bearer.
	Challenge string
	// RetryJitter adds a random wait in [0, RetryJitter), at most an hour,
	// to what refused clients are told. Default: none.
	RetryJitter time.Duration
	// LimiterFor picks each request's limiter (by route or plan); nil means
	// the Middleware's own, the default. Give each its own policy names.
	LimiterFor func(r *http.Request) *Limiter
	// Skip exempts the requests for which it returns true: neither limited
	// nor counted, no header fields. Default: none.
	Skip func(r *http.Request) bool
	// Block and Safe list clients by address or CIDR: a blocked client is
	// answered 403 before anything else, a safe one is skipped, one in both
	// is blocked. Default: no list.
	Block, Safe []string
	// ClientIP is how Block and Safe find the client, as KeyByIP does:
	// behind proxies, give it KeyByIP's options. Default: the TCP peer.
	ClientIP *IPOptions
	// CountIf makes only the responses whose status it accepts count; the
	// others get back what they reserved and did not settle, but
	// "content-bytes". Default: every request counts.
	CountIf func(status int) bool
	// MaxInFlight and MaxInFlightTotal limit the requests running at once,
	// per key and in all (429, policy "inflight"). Default: 0, no limit.
	MaxInFlight, MaxInFlightTotal int
	// MaxQueued bounds the requests waiting in LeakyShape queues, across
	// keys (429 past it). Default: 0, which means 256; negative: no bound.
	MaxQueued int
	// Slots shares the in-flight slots among instances; its failure is
	// answered like a store's. Default: nil, slots per process.
	Slots SlotStore
	// SlotLease is how long a slot of Slots is leased; a running request
	// renews it every third of SlotLease. Required with Slots, at least 1 ms.
	SlotLease time.Duration
	// SlotName names this Middleware's slots in Slots, the same on every
	// instance: 1 to 64 characters from [A-Za-z0-9._-]. Required with Slots.
	SlotName string
	// ResultInContext puts each admitted request's decision in its context,
	// for ResultFrom and Settle, at a few allocations. Default: false.
	ResultInContext bool
	// Clock is the store's clock, by which calendar quotas' header fields
	// (w, the period's length) are written. Default: time.Now.
	Clock func() time.Time
	// Observe is told about every decision, or failure to decide, on the
	// request path: keep it fast and safe for concurrent use. Default: none.
	Observe func(r *http.Request, ev Event)
	// Logger receives the lines about undecided requests and the warnings
	// of docs/operating.md. Default: slog.Default().
	Logger *slog.Logger
	// Quiet turns the warnings off. Default: false.
	Quiet bool
}

// config is the validated form of MiddlewareOptions.
type config struct {
	MiddlewareOptions
	inflight      *inflight
	maxQueued     int64        // MiddlewareOptions.MaxQueued with its default; < 0: no bound
	lists         *addrLists   // nil without Block and Safe
	errors        errorAnswers // the default error handler, and the first refusals
	customOnError bool         // OnError is the caller's, not the default
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
		c.customOnError = true
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
	for unit, f := range c.Costs {
		switch {
		case unit == requests:
			return c, errors.New(`ratelimit: MiddlewareOptions.Costs["requests"]: the cost of requests is MiddlewareOptions.Cost`)
		case !validUnit(unit):
			return c, fmt.Errorf("ratelimit: MiddlewareOptions.Costs: unit %q: want 1 to 64 characters from [a-z0-9._-], starting with a letter", unit)
		case f == nil:
			return c, fmt.Errorf("ratelimit: MiddlewareOptions.Costs[%q]: nil function", unit)
		}
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
