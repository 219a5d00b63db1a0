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

// KeyByClientIP returns a KeyFunc that keys requests by c.ClientIP(), as
// Gin finds it with its own settings (SetTrustedProxies, RemoteIPHeaders,
// TrustedPlatform), keyed as [ratelimit.KeyByIP] would key it. On an
// engine that trusts every proxy, gin.New()'s default, it keys the TCP
// peer instead, unless the address came from a TrustedPlatform header. An
// address that does not parse gives an error wrapping [ratelimit.ErrBadRequest].
//
// opts may be nil; only its IPv6Prefix applies, and it returns an error
// for an invalid opts or one with TrustedProxies or Header. The KeyFunc is
// safe for concurrent use.
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
		return clientKeys.FromIP(ip, bits)
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

// KeyByValue returns a KeyFunc that keys requests by the user ID an
// earlier handler stored with c.Set(name, id), read and keyed as
// [ratelimit.KeyByContextValue] does; no value gives an error wrapping
// [ratelimit.ErrMissingKey].
func KeyByValue(name string) KeyFunc {
	return func(c *gin.Context) (string, error) {
		v, _ := c.Get(name)
		return clientKeys.FromUser(v)
	}
}

// clientKeys makes clientkey's refusals wrap ratelimit's errors.
var clientKeys = clientkey.Keys{MissingKey: ratelimit.ErrMissingKey, BadRequest: ratelimit.ErrBadRequest}
