package ratelimit

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Option configures a [Middleware].
type Option func(*config) error

type config struct {
	cost          func(*http.Request) (int64, error)
	headers       HeaderFormat
	deny          func(http.ResponseWriter, *http.Request, Result)
	onError       func(http.ResponseWriter, *http.Request, error)
	jitter        time.Duration
	wait          func(context.Context, time.Duration) error // tests replace it
	pick          func(*http.Request) *Limiter
	dryRunHeaders bool
	observer      Observer
	skip          func(*http.Request) bool
	exempt        map[string]bool
	countIf       func(status int) bool
	inflight      *inflight
	slots         SlotStore
	lease         time.Duration
	quiet         quiet
}

// WithoutWarnings turns off the Middleware's misconfiguration warnings,
// which are otherwise logged once each with slog.Default (and told to the
// Observer if it is a Warner): nearly all requests having one key
// ([WarnOneKey]), and two limiters sharing a store and a policy name with
// different limits ([WarnSharedPolicyName]). With no kind it turns off both;
// an unknown kind is an error.
func WithoutWarnings(kinds ...string) Option {
	return func(c *config) (err error) {
		c.quiet, err = newQuiet("WithoutWarnings", kinds, []string{WarnOneKey, WarnSharedPolicyName})
		return err
	}
}

// WithSkip exempts the requests for which skip returns true (health checks,
// internal callers): they are neither limited nor counted, and get no
// rate-limit header fields. The default skips nothing.
func WithSkip(skip func(r *http.Request) bool) Option {
	return func(c *config) error {
		if skip == nil {
			return errors.New("ratelimit: WithSkip: nil function")
		}
		c.skip = skip
		return nil
	}
}

// WithExemptKeys exempts the requests whose key, as the key function
// returns it, is one of keys: they are neither limited nor counted, and get
// no rate-limit header fields. For API keys, which KeyByAPIKey hashes, list
// APIKey(secret).
func WithExemptKeys(keys ...string) Option {
	return func(c *config) error {
		if c.exempt == nil {
			c.exempt = map[string]bool{}
		}
		for _, k := range keys {
			c.exempt[k] = true
		}
		return nil
	}
}

// WithCountIf makes only some responses spend the budget: a request is
// still refused when the budget is spent, but after the handler returns,
// its cost is given back unless count(status) is true. The login guard:
// WithCountIf(ratelimit.Failed) allows five failed logins a minute and
// never counts successful ones. A handler that panics does not count. The
// default counts every request.
func WithCountIf(count func(status int) bool) Option {
	return func(c *config) error {
		if count == nil {
			return errors.New("ratelimit: WithCountIf: nil function")
		}
		c.countIf = count
		return nil
	}
}

// Failed reports whether status is an error (400 or above), for
// WithCountIf.
func Failed(status int) bool { return status >= 400 }

// Succeeded reports whether status is not an error (below 400), for
// WithCountIf.
func Succeeded(status int) bool { return status < 400 }

// WithLimiterFor chooses the limiter of each request, for limits that
// differ by route or by the client's plan without one middleware per
// combination: pick returns the limiter to apply, or nil for the one given
// to NewMiddleware. Give each limiter's policies their own names (such as
// "free" and "pro"), since names keep their buckets apart in a shared
// store.
func WithLimiterFor(pick func(r *http.Request) *Limiter) Option {
	return func(c *config) error {
		if pick == nil {
			return errors.New("ratelimit: WithLimiterFor: nil function")
		}
		c.pick = pick
		return nil
	}
}

// WithDryRunHeaders makes the header fields include the dry-run policies,
// as if they were enforced, so that clients see the limit coming. By
// default dry-run policies are invisible to clients.
func WithDryRunHeaders() Option {
	return func(c *config) error {
		c.dryRunHeaders = true
		return nil
	}
}

// WithCost sets the function that tells how many tokens a request costs, for
// example the number of addresses in a batch request. The default costs 1.
// An error from f is answered by the error handler with 400 Bad Request.
func WithCost(f func(*http.Request) (int64, error)) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("ratelimit: WithCost: nil function")
		}
		c.cost = f
		return nil
	}
}

// WithHeaders selects the rate-limit header fields written on every
// decided response. The default is HeadersIETF.
func WithHeaders(f HeaderFormat) Option {
	return func(c *config) error {
		if f > HeadersNone {
			return errors.New("ratelimit: WithHeaders: unknown format")
		}
		c.headers = f
		return nil
	}
}

// WithDenyHandler sets the function that answers a refused request. When it
// runs, the rate-limit header fields and Retry-After are already set on w.
// The default answers 429 Too Many Requests with Cache-Control: no-store and
// an application/problem+json body of the IETF quota-exceeded problem type
// that names the violated policies.
func WithDenyHandler(h func(w http.ResponseWriter, r *http.Request, res Result)) Option {
	return func(c *config) error {
		if h == nil {
			return errors.New("ratelimit: WithDenyHandler: nil handler")
		}
		c.deny = h
		return nil
	}
}

// WithErrorHandler sets the function that answers a request that could not
// be decided: the key or cost function failed, the cost can never pass, or
// the store failed. The default is [DefaultErrorHandler].
func WithErrorHandler(h func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return func(c *config) error {
		if h == nil {
			return errors.New("ratelimit: WithErrorHandler: nil handler")
		}
		c.onError = h
		return nil
	}
}

// WithRetryJitter adds a random duration in [0, max) to the wait reported to
// refused clients (Retry-After and the reset parameter), so that clients
// refused together do not all come back in the same second. The default is
// no jitter.
func WithRetryJitter(max time.Duration) Option {
	return func(c *config) error {
		if max < 0 {
			return errors.New("ratelimit: WithRetryJitter: negative duration")
		}
		c.jitter = max
		return nil
	}
}
