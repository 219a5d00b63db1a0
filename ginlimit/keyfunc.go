package ginlimit

import (
	"github.com/gin-gonic/gin"

	"github.com/tokenfair/ratelimit"
)

// KeyByClientIP returns a KeyFunc that keys requests by c.ClientIP(), the
// client address as Gin finds it with its own settings:
// Engine.SetTrustedProxies, Engine.RemoteIPHeaders and
// Engine.TrustedPlatform. The address is normalised exactly as
// [ratelimit.KeyByIP] does ("ip:203.0.113.7", IPv4-mapped IPv6 addresses
// unmapped, zones dropped), so the same client has the same key whichever
// adapter serves it; an address that cannot be parsed gives an error
// wrapping ratelimit.ErrNoClientIP (400).
//
// Gin trusts every proxy until told otherwise, so that any client can pick
// its own key with an X-Forwarded-For field: call
// engine.SetTrustedProxies with your proxies' addresses, or nil when there
// are none.
//
// opts are the core's IP options. [ratelimit.IPv6Prefix] groups IPv6
// clients by network; TrustedProxies and ProxyHeader have no effect here,
// since Gin has chosen the address already. KeyByClientIP returns the
// error of an invalid option.
func KeyByClientIP(opts ...ratelimit.IPOption) (KeyFunc, error) {
	key, err := ratelimit.KeyByAddr(opts...)
	if err != nil {
		return nil, err
	}
	return func(c *gin.Context) (string, error) { return key(c.ClientIP()) }, nil
}

// KeyByValue returns a KeyFunc that keys requests by the value stored in
// the Gin context under name (c.Set(name, v)), typically the ID of the user
// that the authentication handler found. The value is read and keyed exactly
// as [ratelimit.KeyByContextValue] does: a non-empty string or
// [fmt.Stringer], keyed "user:ID" (long IDs hashed); anything else, or no
// value, gives ratelimit.ErrMissingKey (401).
func KeyByValue(name string) KeyFunc {
	return func(c *gin.Context) (string, error) {
		v, _ := c.Get(name)
		return ratelimit.ValueKey(v)
	}
}
