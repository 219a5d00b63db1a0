package ginlimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

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
// Gin trusts every proxy until told otherwise (Engine.SetTrustedProxies),
// so that on gin.New() any client could pick its own key, or another's,
// with an X-Forwarded-For field. On an engine that trusts every proxy
// (0.0.0.0/0 or ::/0), KeyByClientIP keys the TCP peer instead, as
// echolimit.KeyByRealIP does without an IPExtractor, unless the address
// came from the engine's TrustedPlatform header, an explicit choice. Call
// engine.SetTrustedProxies with your proxies' addresses to read a
// forwarding header. Gin reports none of its settings, so when
// c.ClientIP() is not the peer's address KeyByClientIP asks Gin once more,
// for a copy of the request from the unspecified address: a few
// allocations, on that path only.
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
	return func(c *gin.Context) (string, error) {
		ip := c.ClientIP()
		if peer := c.RemoteIP(); ip != peer && trustsEveryProxy(c, ip, peer) {
			ip = peer
		}
		return keyErrors.IP(ip, bits)
	}, nil
}

// probeValue is the value of the forwarding headers of trustsEveryProxy's
// request. Gin's walk of a list whose every entry it trusts answers its
// leftmost entry, probeClient; a TrustedPlatform header is answered as it
// is.
const (
	probeValue  = "192.0.2.1, 192.0.2.2"
	probeClient = "192.0.2.1"
)

// trustsEveryProxy reports whether c's engine found ip, not the address of
// the peer, in a forwarding header because it trusts every proxy. It asks
// c.ClientIP() again, for a copy of the request from the unspecified
// address of peer's family, whose header fields that may have given ip
// (those holding it) all say probeValue: an engine that trusts that
// address trusts all. A TrustedPlatform header gives probeValue as it is.
func trustsEveryProxy(c *gin.Context, ip, peer string) bool {
	probe := *c.Request
	probe.RemoteAddr = "[::]:1"
	if a, err := netip.ParseAddr(peer); err == nil && a.Unmap().Is4() {
		probe.RemoteAddr = "0.0.0.0:1" // Gin unmaps IPv4-mapped peers too
	}
	probe.Header = make(http.Header, 2)
	for name, vs := range c.Request.Header {
		for _, v := range vs {
			if strings.Contains(v, ip) {
				probe.Header[name] = []string{probeValue}
				break
			}
		}
	}
	req := c.Request
	c.Request = &probe
	defer func() { c.Request = req }()
	return c.ClientIP() == probeClient
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
		return keyErrors.User(v)
	}
}

// keyErrors makes clientkey's refusals wrap ratelimit's errors.
var keyErrors = clientkey.Sentinels{MissingKey: ratelimit.ErrMissingKey, BadRequest: ratelimit.ErrBadRequest}
