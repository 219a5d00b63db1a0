package echolimit

import (
	"github.com/labstack/echo/v4"

	"github.com/tokenfair/ratelimit"
)

// KeyByRealIP returns a KeyFunc that keys requests by c.RealIP(), the
// client address as the Echo instance's IPExtractor finds it, such as
// echo.ExtractIPFromXFFHeader with the trust options of your proxies. The
// address is normalised exactly as [ratelimit.KeyByIP] does
// ("ip:203.0.113.7", IPv4-mapped IPv6 addresses unmapped, zones dropped), so
// the same client has the same key whichever adapter serves it; an address
// that cannot be parsed gives an error wrapping ratelimit.ErrNoClientIP
// (400).
//
// Without an IPExtractor, Echo v4's RealIP believes the leftmost
// X-Forwarded-For entry, or X-Real-IP, which any client can write to pick
// its own key; KeyByRealIP then uses the TCP peer instead, as
// echo.ExtractIPDirect does. Set e.IPExtractor to read a forwarding header.
//
// opts are the core's IP options. [ratelimit.IPv6Prefix] groups IPv6
// clients by network; TrustedProxies and ProxyHeader have no effect here,
// since the IPExtractor has chosen the address already. KeyByRealIP returns
// the error of an invalid option.
func KeyByRealIP(opts ...ratelimit.IPOption) (KeyFunc, error) {
	key, err := ratelimit.KeyByAddr(opts...)
	if err != nil {
		return nil, err
	}
	return func(c echo.Context) (string, error) {
		if e := c.Echo(); e != nil && e.IPExtractor != nil {
			return key(c.RealIP())
		}
		return key(c.Request().RemoteAddr)
	}, nil
}

// KeyByValue returns a KeyFunc that keys requests by the value stored in
// the Echo context under name (c.Set(name, v)), typically the ID of the
// user that the authentication middleware found. The value is read and
// keyed exactly as [ratelimit.KeyByContextValue] does: a non-empty string
// or [fmt.Stringer], keyed "user:ID" (long IDs hashed); anything else, or no
// value, gives ratelimit.ErrMissingKey (401).
func KeyByValue(name string) KeyFunc {
	return func(c echo.Context) (string, error) { return ratelimit.ValueKey(c.Get(name)) }
}
