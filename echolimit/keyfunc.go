package echolimit

import (
	"errors"
	"fmt"

	"github.com/labstack/echo/v4"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/clientkey"
)

// KeyByRealIP returns a KeyFunc that keys requests by c.RealIP(), as the
// Echo instance's IPExtractor finds it (echo.ExtractIPFromXFFHeader with
// your proxies' trust options, say), keyed as [ratelimit.KeyByIP] would
// key it. Without an IPExtractor, Echo v4 believes X-Real-IP or the
// leftmost X-Forwarded-For entry, which any client writes, so KeyByRealIP
// keys the TCP peer instead. An address that does not parse gives an error wrapping
// [ratelimit.ErrBadRequest].
//
// opts may be nil; only its IPv6Prefix applies, and it returns an error
// for an invalid opts or one with TrustedProxies or Header. The KeyFunc is
// safe for concurrent use.
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
			return clientKeys.FromIP(c.RealIP(), bits)
		}
		return clientKeys.FromIP(c.Request().RemoteAddr, bits)
	}, nil
}

// KeyByValue returns a KeyFunc that keys requests by the user ID an
// earlier middleware stored with c.Set(name, id), read and keyed as
// [ratelimit.KeyByContextValue] does; no value gives an error wrapping
// [ratelimit.ErrMissingKey].
func KeyByValue(name string) KeyFunc {
	return func(c echo.Context) (string, error) { return clientKeys.FromUser(c.Get(name)) }
}

// clientKeys makes clientkey's refusals wrap ratelimit's errors.
var clientKeys = clientkey.Keys{MissingKey: ratelimit.ErrMissingKey, BadRequest: ratelimit.ErrBadRequest}
