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
// of a request for the address lists MiddlewareOptions.Block and Safe (as
// MiddlewareOptions.ClientIP). A nil *IPOptions, like the zero value, takes every
// request's TCP peer for its client.
type IPOptions struct {
	// TrustedProxies lists the reverse proxies and load balancers in front
	// of the server, whose forwarding header (see Header) is believed when
	// one of them is the TCP peer. Each entry is a CIDR prefix, such as
	// "10.0.0.0/8" or "2001:db8::/32", or a single IP address, which stands
	// for a /32 or a /128. IPv4-mapped IPv6 entries such as
	// "::ffff:10.0.0.0/104" are turned into their IPv4 form; other IPv6
	// prefixes never match an IPv4 address. Entries that are empty after
	// trimming spaces are skipped, so that strings.Split("", ",") gives no
	// proxies. The default, nil, trusts no proxy: the client is always the
	// TCP peer.
	TrustedProxies []string

	// Header names the request header field from which the client address
	// is taken when the peer is a trusted proxy: "X-Forwarded-For",
	// "Forwarded" (RFC 7239, its for= parameters) or "X-Real-IP", in any
	// case. The default, "", is "X-Forwarded-For". Without TrustedProxies
	// no header is read.
	Header string

	// IPv6Prefix groups IPv6 clients by their first IPv6Prefix bits, from 1
	// to 128, so that all the addresses of a network share one bucket: the
	// key is the prefix, such as "ip:2001:db8:1:2::/64". The default, 0, is
	// 64: every subscriber has a /64 at least, and changes address within it
	// at will (privacy extensions), while a wider prefix would also join
	// subscribers, such as the mobile devices of one carrier, that each have
	// a /64. ISPs often assign a /56 or a /48, which 56 or 48 groups; 128
	// keys every IPv6 address on its own. IPv4 addresses are never grouped.
	IPv6Prefix int

	// Logger receives the warnings of KeyByIP (and of a Middleware's
	// address lists, as MiddlewareOptions.ClientIP), with the attribute "warning"
	// naming their kind: "wide-trusted-range", logged by KeyByIP for each
	// trusted range that covers much of the internet, such as 0.0.0.0/0;
	// and "forwarded-without-trusted-proxy", logged once by the KeyFunc when
	// requests carry X-Forwarded-For or Forwarded while no proxy is trusted
	// (it looks at the first request of each connection), which usually
	// means that every client is keyed by the proxy's address. The default,
	// nil, is slog.Default() at the time of the warning.
	Logger *slog.Logger

	// Quiet turns off the warnings KeyByIP logs; default false. To drop
	// one kind only, filter on the "warning" attribute in Logger's
	// slog.Handler.
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

// isTrusted reports whether a, which is unmapped and has no zone, belongs to
// a trusted proxy.
func (c *ipConfig) isTrusted(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// KeyByIP returns a KeyFunc that keys requests by the client's IP address:
// "ip:203.0.113.7", or for IPv6 its network, "ip:2001:db8:1:2::/64" (see
// IPOptions.IPv6Prefix; "ip:2001:db8:1:2::7" with a prefix of 128).
// Addresses are normalised first: IPv4-mapped IPv6
// addresses become IPv4 (::ffff:192.0.2.1 is 192.0.2.1) and zones are
// dropped (fe80::1%eth0 is fe80::1), so no client has two keys. opts may be
// nil.
//
// The client is the TCP peer, r.RemoteAddr, unless the peer is one of
// opts.TrustedProxies. Then the forwarding header opts.Header is read from
// the right, skipping the addresses of trusted proxies, and the first other
// address is the client; when every entry is trusted the client is the
// leftmost one, and when the header is absent, the peer. At most 32
// entries are examined. The package documentation, under "Running behind
// a proxy", says why.
//
// An address that cannot be parsed (r.RemoteAddr, or a header entry reached
// by the walk, such as "unknown" or an obfuscated RFC 7239 identifier) gives
// an error wrapping ErrBadRequest, never a key built from the raw text; so
// does an entry reached by the walk that names no client, which skipping
// would let the client's own entry to its left be believed: an empty
// X-Forwarded-For entry or X-Real-IP, a Forwarded element without for=. The
// default error handler answers it with 400 and a problem detail that names
// the field, never its value ("the trusted proxy sent an X-Forwarded-For
// entry that is not an IP address").
//
// KeyByIP returns an error naming the field and the value at fault if opts
// is invalid. The KeyFunc is safe for concurrent use.
func KeyByIP(opts *IPOptions) (KeyFunc, error) {
	c, err := newIPConfig("KeyByIP", opts)
	if err != nil {
		return nil, err
	}
	c.warnWide()
	return func(r *http.Request) (string, error) {
		peer, err := c.peer(r)
		if err != nil {
			return "", err
		}
		if len(c.trusted) == 0 || !c.isTrusted(peer.addr) {
			return peer.key, nil
		}
		a, err := c.forwarded(r, peer.addr)
		if err != nil {
			return "", err
		}
		return clientkey.Addr(a, c.v6bits), nil
	}, nil
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

// forwarded returns the client address of r, whose TCP peer is the trusted
// proxy peer, from the forwarding header.
func (c *ipConfig) forwarded(r *http.Request, peer netip.Addr) (netip.Addr, error) {
	switch c.header {
	case headerForwarded:
		return c.fromForwarded(r.Header["Forwarded"], peer)
	case headerRealIP:
		return fromRealIP(r.Header["X-Real-Ip"], peer)
	default:
		return c.fromXFF(r.Header["X-Forwarded-For"], peer)
	}
}
