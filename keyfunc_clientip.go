package ratelimit

import (
	"fmt"
	"hash/maphash"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/tokenfair/ratelimit/internal/clientkey"
)

// errNoClientIP: the request has no usable client address. It wraps
// ErrBadRequest.
var errNoClientIP = fmt.Errorf("%w: no valid client IP", ErrBadRequest)

// noClientIP is the refusal of a request without a usable client address:
// err, which wraps errNoClientIP and may quote the value at fault, with
// detail, which must not.
func noClientIP(detail string, err error) error {
	return &clientkey.Error{Err: err, Kind: clientkey.KindClientIP, Detail: detail}
}

// IPOptions configures [KeyByIP], and how a [Middleware] finds the client
// for MiddlewareOptions.Block and Safe (as MiddlewareOptions.ClientIP). A nil
// *IPOptions, like the zero value, takes the TCP peer for the client.
type IPOptions struct {
	// TrustedProxies lists the proxies whose forwarding header is believed
	// when one is the TCP peer: CIDR prefixes ("10.0.0.0/8") or addresses;
	// empty entries are skipped. Default: none, the client is the peer.
	TrustedProxies []string
	// Header is the forwarding header read from a trusted proxy, in any
	// case: "X-Forwarded-For" (default), "Forwarded" or "X-Real-IP".
	Header string
	// IPv6Prefix groups IPv6 clients by their first IPv6Prefix bits, 1 to
	// 128. Default: 0, which means 64 (docs/keys.md#ipv6 says why).
	IPv6Prefix int
	// Logger receives the warnings (docs/operating.md): "wide-trusted-range"
	// and "forwarded-without-trusted-proxy". Default: slog.Default().
	Logger *slog.Logger
	// Quiet turns the warnings off. Default: false.
	Quiet bool
}

type proxyHeader uint8

const (
	headerXFF proxyHeader = iota
	headerForwarded
	headerRealIP
)

// ipConfig is the validated form of IPOptions.
type ipConfig struct {
	trusted []netip.Prefix // unmapped, without zone
	header  proxyHeader
	v6bits  int          // 0: none (a /128)
	logger  *slog.Logger // nil: slog.Default()
	quiet   bool         // IPOptions.Quiet

	checkForwarded bool        // warn about forwarding headers without trusted proxies
	warned         atomic.Bool // the forwarding headers warning was logged

	seed  maphash.Seed
	peers recent[string, peerKey] // the peers seen lately, by RemoteAddr
}

// newIPConfig checks opts for who, KeyByIP or MiddlewareOptions.ClientIP, which its
// errors name.
func newIPConfig(who string, opts *IPOptions) (*ipConfig, error) {
	var o IPOptions
	if opts != nil {
		o = *opts
	}
	c := &ipConfig{logger: o.Logger, seed: maphash.MakeSeed()}
	for _, s := range o.TrustedProxies {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := parseTrusted(s)
		if err != nil {
			return nil, fmt.Errorf("ratelimit: %s: TrustedProxies entry %q: want a CIDR prefix or an IP address", who, s)
		}
		c.trusted = append(c.trusted, p)
	}
	switch http.CanonicalHeaderKey(strings.TrimSpace(o.Header)) {
	case "", "X-Forwarded-For":
		c.header = headerXFF
	case "Forwarded":
		c.header = headerForwarded
	case "X-Real-Ip":
		c.header = headerRealIP
	default:
		return nil, fmt.Errorf("ratelimit: %s: Header %q: want X-Forwarded-For, Forwarded or X-Real-IP", who, o.Header)
	}
	var err error
	if c.v6bits, err = clientkey.IPv6Bits(o.IPv6Prefix); err != nil {
		return nil, fmt.Errorf("ratelimit: %s: %w", who, err)
	}
	c.quiet = o.Quiet
	c.checkForwarded = len(c.trusted) == 0 && !c.quiet
	return c, nil
}

// parseTrusted parses an entry of IPOptions.TrustedProxies.
func parseTrusted(s string) (netip.Prefix, error) {
	if strings.IndexByte(s, '/') < 0 {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		a = a.Unmap().WithZone("")
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	p = p.Masked()
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p, nil
}

// log returns the logger of the warnings.
func (c *ipConfig) log() *slog.Logger {
	if c.logger != nil {
		return c.logger
	}
	return slog.Default()
}

// warnWide logs the wide-trusted-range warning for each trusted range that
// covers much of the internet.
func (c *ipConfig) warnWide() {
	if c.quiet {
		return
	}
	for _, p := range c.trusted {
		if p.Bits() < 8 || p.Addr().Is6() && p.Bits() < 16 {
			c.log().Warn("ratelimit: a trusted proxy range covers much of the internet; clients there can forge their address",
				"warning", warnWideTrustedRange, "range", p.String())
		}
	}
}

// warnForwarded logs the forwarded-without-trusted-proxy warning once,
// when requests carry a forwarding header while no proxy is trusted. peer
// calls it for the first request from each TCP peer (each connection, as
// RemoteAddr has the port) that its cache does not hold, so that the other
// requests pay for no header lookup: a proxy in front forwards every
// request, the first of each connection included.
func (c *ipConfig) warnForwarded(r *http.Request) {
	if c.checkForwarded && !c.warned.Load() &&
		(r.Header["X-Forwarded-For"] != nil || r.Header["Forwarded"] != nil) && c.warned.CompareAndSwap(false, true) {
		c.log().WarnContext(r.Context(), "ratelimit: requests carry X-Forwarded-For or Forwarded but no proxy is trusted, so every client behind the proxy shares its address; see IPOptions.TrustedProxies",
			"warning", warnForwardedWithoutTrustedProxy)
	}
}

// clientAddr returns the address of r's client as KeyByIP finds it,
// unmapped and without a zone, or KeyByIP's error.
func (c *ipConfig) clientAddr(r *http.Request) (netip.Addr, error) {
	peer, err := c.peer(r)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(c.trusted) == 0 || !c.isTrusted(peer.addr) {
		return peer.addr, nil
	}
	return c.forwarded(r, peer.addr)
}

// peerKey is a TCP peer's address and its key.
type peerKey struct {
	addr netip.Addr
	key  string
}

// peer returns the address and key of r's TCP peer (r.RemoteAddr). The
// peers seen lately are remembered, so that a client's requests on one
// connection parse its address, make its key and look for forwarding
// headers (warnForwarded) once.
func (c *ipConfig) peer(r *http.Request) (peerKey, error) {
	remote := r.RemoteAddr
	h := maphash.String(c.seed, remote)
	if p, ok := c.peers.get(remote, h); ok {
		return p, nil
	}
	c.warnForwarded(r)
	a, ok := clientkey.ParseAddr(remote)
	if !ok {
		return peerKey{}, noClientIP("the request's remote address is not an IP address",
			fmt.Errorf("%w: RemoteAddr %q", errNoClientIP, clientkey.Clip(remote)))
	}
	p := peerKey{a, clientkey.Addr(a, c.v6bits)}
	c.peers.put(remote, h, p)
	return p, nil
}
