// Package quick builds the middleware of the adapters' one-line forms
// (nethttp.Limit, ginlimit.Limit, echolimit.Limit), so that the three build
// it the same way.
package quick

import (
	"fmt"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

// Middleware returns a Middleware that limits requests to limit per key,
// with one unnamed policy on an in-process memorystore with its defaults,
// and the default Options. It panics when limit or key is invalid, with an
// error that starts with caller (such as "nethttp.Limit") and says what is
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
