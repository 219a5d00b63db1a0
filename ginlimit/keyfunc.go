package ginlimit

import (
	"errors"
	"fmt"

	"github.com/gin-gonic/gin"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/clientkey"
)

// KeyByClientIP returns a KeyFunc that keys requests by c.ClientIP(), the
// client address as Gin finds it with its own settings:
// Engine.SetTrustedProxies, Engine.RemoteIPHeaders and
// Engine.TrustedPlatform. The address is keyed exactly as
// [ratelimit.KeyByIP] keys the address it finds ("ip:203.0.113.7",
// IPv4-mapped IPv6 addresses unmapped, zones dropped), so the same client
// has the same key whichever adapter serves it; an address that cannot be
// parsed gives an error wrapping ratelimit.ErrBadRequest (400).
//
// Gin trusts every proxy until told otherwise, so that any client can pick
// its own key with an X-Forwarded-For field: call
// engine.SetTrustedProxies with your proxies' addresses, or nil when there
// are none.
//
// opts may be nil. Its IPv6Prefix groups IPv6 clients by network, by
// default by /64, as KeyByIP does; since
// Gin chooses the address, TrustedProxies and Header must be left empty,
// and KeyByClientIP logs no warnings. KeyByClientIP returns an error if
// opts is invalid. The KeyFunc is safe for concurrent use.
func KeyByClientIP(opts *ratelimit.IPOptions) (KeyFunc, error) {
	var o ratelimit.IPOptions
	if opts != nil {
		o = *opts
	}
	if len(o.TrustedProxies) > 0 || o.Header != "" {
		return nil, errors.New("ginlimit: KeyByClientIP: IPOptions.TrustedProxies and Header have no effect, since Gin chooses the address: use Engine.SetTrustedProxies and Engine.RemoteIPHeaders")
	}
	bits, err := clientkey.IPv6Bits(o.IPv6Prefix)
	if err != nil {
		return nil, fmt.Errorf("ginlimit: KeyByClientIP: %w", err)
	}
	return func(c *gin.Context) (string, error) { return clientkey.IP(c.ClientIP(), bits) }, nil
}

// KeyByValue returns a KeyFunc that keys requests by the value stored in
// the Gin context under name (c.Set(name, v)), typically the ID of the user
// that the authentication handler found. The value is read and keyed exactly
// as [ratelimit.KeyByContextValue] does: a non-empty string, an
// integer, a [fmt.Stringer] or a [16]byte (UUID), or a named type of one
// of them, keyed "user:ID" (42, "42" and UserID("42") are one user; long
// IDs hashed); no value or an empty one gives ratelimit.ErrMissingKey
// (401), and a value of another type, the server's mistake, an error
// naming the type that the default error handler answers with 500.
func KeyByValue(name string) KeyFunc {
	return func(c *gin.Context) (string, error) {
		v, _ := c.Get(name)
		return clientkey.User(v)
	}
}
