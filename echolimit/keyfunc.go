package echolimit

import (
	"errors"
	"fmt"

	"github.com/labstack/echo/v4"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/clientkey"
)

// KeyByRealIP returns a KeyFunc that keys requests by c.RealIP(), the
// client address as the Echo instance's IPExtractor finds it, such as
// echo.ExtractIPFromXFFHeader with the trust options of your proxies. The
// address is keyed exactly as [ratelimit.KeyByIP] keys the address it finds
// ("ip:203.0.113.7", IPv4-mapped IPv6 addresses unmapped, zones dropped),
// so the same client has the same key whichever adapter serves it; an
// address that cannot be parsed gives an error wrapping
// ratelimit.ErrBadRequest (400).
//
// Without an IPExtractor, Echo v4's RealIP believes the leftmost
// X-Forwarded-For entry, or X-Real-IP, which any client can write to pick
// its own key; KeyByRealIP then uses the TCP peer instead, as
// echo.ExtractIPDirect does. Set e.IPExtractor to read a forwarding header.
//
// opts may be nil. Its IPv6Prefix groups IPv6 clients by network, by
// default by /64, as KeyByIP does; since
// the IPExtractor chooses the address, TrustedProxies and Header must be
// left empty, and KeyByRealIP logs no warnings. KeyByRealIP returns an
// error if opts is invalid. The KeyFunc is safe for concurrent use.
func KeyByRealIP(opts *ratelimit.IPOptions) (KeyFunc, error) {
	var o ratelimit.IPOptions
	if opts != nil {
		o = *opts
	}
	if len(o.TrustedProxies) > 0 || o.Header != "" {
		return nil, errors.New("echolimit: KeyByRealIP: IPOptions.TrustedProxies and Header have no effect, since the IPExtractor chooses the address: set Echo.IPExtractor")
	}
	bits, err := clientkey.IPv6Bits(o.IPv6Prefix)
	if err != nil {
		return nil, fmt.Errorf("echolimit: KeyByRealIP: %w", err)
	}
	return func(c echo.Context) (string, error) {
		if e := c.Echo(); e != nil && e.IPExtractor != nil {
			return keyErrors.IP(c.RealIP(), bits)
		}
		return keyErrors.IP(c.Request().RemoteAddr, bits)
	}, nil
}

// KeyByValue returns a KeyFunc that keys requests by the value stored in
// the Echo context under name (c.Set(name, v)), typically the ID of the
// user that the authentication middleware found. The value is read and
// keyed exactly as [ratelimit.KeyByContextValue] does: a non-empty string, an
// integer, a [fmt.Stringer] or a [16]byte (UUID), or a named type of one
// of them, keyed "user:ID" (42, "42" and UserID("42") are one user; long
// IDs hashed); no value or an empty one gives ratelimit.ErrMissingKey
// (401), and a value of another type, the server's mistake, an error
// naming the type that the default error handler answers with 500.
func KeyByValue(name string) KeyFunc {
	return func(c echo.Context) (string, error) { return keyErrors.User(c.Get(name)) }
}

// keyErrors makes clientkey's refusals wrap ratelimit's errors.
var keyErrors = clientkey.Sentinels{MissingKey: ratelimit.ErrMissingKey, BadRequest: ratelimit.ErrBadRequest}
