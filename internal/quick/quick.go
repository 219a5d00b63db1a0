// Package quick builds the middleware of the adapters' one-line forms
// (nethttp.LimitBy, ginlimit.LimitBy, echolimit.LimitBy), and checks the one each
// adapter is given, so that the three do both the same way.
package quick

import (
	"fmt"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

// Middleware returns a Middleware that limits requests to limit per key,
// with one unnamed policy on an in-process memorystore with its defaults,
// and the default Options. It panics when limit or key is invalid, with an
// error that starts with caller (such as "nethttp.LimitBy") and says what is
// wrong.
func Middleware(caller string, limit ratelimit.Limit, key ratelimit.KeyFunc) *ratelimit.Middleware {
	if key == nil {
		panic(fmt.Errorf("%s: nil key function", caller))
	}
	store, err := memorystore.New(nil)
	if err != nil {
		panic(fmt.Errorf("%s: %w", caller, err))
	}
	l, err := ratelimit.New(store, ratelimit.Policy{Limit: limit})
	if err != nil {
		panic(fmt.Errorf("%s: %w", caller, err))
	}
	m, err := ratelimit.NewMiddleware(l, key, nil)
	if err != nil {
		panic(fmt.Errorf("%s: %w", caller, err))
	}
	return m
}

// Given returns m, the middleware given to caller (such as
// "nethttp.Wrap"), and panics with an error that says so when it is
// nil: the usual cause is an error of ratelimit.NewMiddleware left
// unchecked.
func Given(caller string, m *ratelimit.Middleware) *ratelimit.Middleware {
	if m == nil {
		panic(fmt.Errorf("%s: nil *ratelimit.Middleware (check the error of ratelimit.NewMiddleware)", caller))
	}
	return m
}

// Run runs chain, the rest of an adapter's chain, for the next function of
// Middleware.Handle, and returns the response's status as status reports
// it. If chain panics after the response has begun (begun reports true),
// Run returns the status and the panic's value, which the adapter raises
// again once Handle has returned: the client got that status, so the
// request counts by it (Options.CountIf). A chain that panics before it
// has written anything panics through Handle, which gives the request's
// cost back.
func Run(chain func(), status func() (code int, begun bool)) (code int, panicked any) {
	defer func() {
		if c, begun := status(); begun {
			if panicked = recover(); panicked != nil {
				code = c
			}
		}
	}()
	chain()
	code, _ = status()
	return code, nil
}
