package ratelimit

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
)

// KeyFunc returns the key that identifies the client of a request: requests
// with the same key share a bucket. It returns ErrMissingKey when the request
// carries no identity. An empty key with a nil error is refused by the
// middleware (ErrMissingKey), never turned into one bucket shared by everybody.
type KeyFunc func(r *http.Request) (string, error)

// Errors returned by the key functions of this package.
var errNoClientIP = fmt.Errorf("%w: no valid client IP", ErrBadRequest)

// hashedLen is the length of hashKey's digest: 16 bytes of SHA-256 in
// unpadded base64url.
var hashedLen = base64.RawURLEncoding.EncodedLen(16)

// hashKey returns prefix followed by the unpadded base64url encoding of the
// first 16 bytes of the SHA-256 of v, built with a single allocation.
func hashKey(prefix, v string) string {
	var sum [sha256.Size]byte
	if len(v) <= 128 {
		var tmp [128]byte // spares the copy of a usual key on the heap
		sum = sha256.Sum256(tmp[:copy(tmp[:], v)])
	} else {
		sum = sha256.Sum256([]byte(v))
	}
	var buf [32]byte
	b := append(buf[:0], prefix...)
	n := len(b)
	b = b[:n+hashedLen]
	base64.RawURLEncoding.Encode(b[n:], sum[:16])
	return string(b)
}

// KeyByAPIKey returns a KeyFunc that keys requests by the API key in the
// request header field named header, such as "X-API-Key". Only the first
// line of the field is used, with surrounding spaces removed; a missing or
// empty field gives ErrMissingKey (so does an empty header name, which
// matches no field).
//
// Keys are hashed so stores never hold secrets: the key is "ak:" followed by
// the first 16 bytes of the SHA-256 of the API key in unpadded base64url, 25
// bytes whatever the length of the API key. The same API key always gives the
// same key. The hash is not salted, which is safe for API keys with the
// entropy of random tokens but not for guessable secrets such as passwords.
//
// KeyByAPIKey does not check that the API key is valid: run it after the
// authentication middleware, or limit by IP in front of authentication,
// otherwise a client can escape its limit by sending a fresh made-up key with
// every request.
func KeyByAPIKey(header string) KeyFunc {
	name := http.CanonicalHeaderKey(strings.TrimSpace(header))
	return func(r *http.Request) (string, error) {
		vs := r.Header[name]
		if len(vs) == 0 {
			return "", ErrMissingKey
		}
		if v := strings.TrimSpace(vs[0]); v != "" {
			return APIKey(v), nil
		}
		return "", ErrMissingKey
	}
}

// APIKey returns the key that [KeyByAPIKey] gives a request carrying the API
// key secret, for WithExemptKeys and for finding a client in a store.
func APIKey(secret string) string { return hashKey("ak:", strings.TrimSpace(secret)) }

// maxUserIDLen is the longest user ID that KeyByContextValue keeps as is.
const maxUserIDLen = 128

// KeyByContextValue returns a KeyFunc that keys requests by a user ID that an
// earlier middleware, usually the authentication middleware, stored in the
// request's context under ctxKey. The value must be a non-empty string, or a
// [fmt.Stringer] whose String method returns a non-empty string; anything
// else, including no value, gives ErrMissingKey.
//
// The key is "user:" followed by the ID. An ID longer than 128 bytes is
// hashed as by [KeyByAPIKey] so that keys stay short: its key is "user#:"
// followed by 22 characters of base64url SHA-256. The two forms never
// collide.
func KeyByContextValue(ctxKey any) KeyFunc {
	return func(r *http.Request) (string, error) { return ValueKey(r.Context().Value(ctxKey)) }
}

// ValueKey returns the key that [KeyByContextValue] gives a user ID v found
// elsewhere, such as in a framework's own context: "user:ID" for a
// non-empty string or [fmt.Stringer], long IDs hashed, and ErrMissingKey for
// anything else.
func ValueKey(v any) (string, error) {
	var id string
	switch v := v.(type) {
	case string:
		id = v
	case fmt.Stringer:
		id = v.String()
	}
	switch {
	case id == "":
		return "", ErrMissingKey
	case len(id) > maxUserIDLen:
		return hashKey("user#:", id), nil
	}
	return "user:" + id, nil
}

// IPOption configures [KeyByIP].
type IPOption func(*ipConfig) error

type proxyHeader uint8

const (
	headerXFF proxyHeader = iota
	headerForwarded
	headerRealIP
)

type ipConfig struct {
	trusted []netip.Prefix
	header  proxyHeader
	v6bits  int // 0: no grouping
	quiet   quiet
	logger  *slog.Logger
	warned  atomic.Bool // forwarding headers without trusted proxies
}

// QuietIP turns off the warnings of [KeyByIP]: about a trusted range so
// wide that it trusts the internet ([warnWideTrustedRange]), and about
// requests that carry forwarding headers while no proxy is trusted, which
// usually means every client is keyed by the proxy's address
// ([warnForwardedWithoutTrustedProxy]). With no kind it turns off both; an
// unknown kind is an error.
func QuietIP(kinds ...string) IPOption {
	return func(c *ipConfig) (err error) {
		c.quiet, err = newQuiet("QuietIP", kinds, []string{warnWideTrustedRange, warnForwardedWithoutTrustedProxy})
		return err
	}
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

// TrustedProxies lists the reverse proxies and load balancers in front of the
// server whose forwarding header (see [ProxyHeader]) is believed. Each entry
// is a CIDR prefix, such as "10.0.0.0/8" or "2001:db8::/32", or a single IP,
// which stands for a /32 or a /128. IPv4-mapped IPv6 entries such as
// "::ffff:10.0.0.0/104" are turned into their IPv4 form; other IPv6 prefixes
// never match an IPv4 address. Entries that are empty after trimming spaces
// are skipped, so that strings.Split("", ",") gives no proxies. An invalid
// entry makes [KeyByIP] fail with an error that names it.
//
// TrustedProxies may be given more than once; the lists add up. The default
// is no trusted proxies: the client is always the TCP peer.
func TrustedProxies(cidrs ...string) IPOption {
	return func(c *ipConfig) error {
		for _, s := range cidrs {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			p, err := parseTrusted(s)
			if err != nil {
				return fmt.Errorf("ratelimit: TrustedProxies: invalid entry %q: want a CIDR prefix or an IP address", s)
			}
			c.trusted = append(c.trusted, p)
		}
		return nil
	}
}

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

// ProxyHeader names the request header field from which the client address
// is taken when the peer is a trusted proxy: "X-Forwarded-For" (the default),
// "Forwarded" (RFC 7239, its for= parameters) or "X-Real-IP". The name is
// case-insensitive; any other name makes [KeyByIP] fail. Without
// [TrustedProxies] the header is never read.
func ProxyHeader(name string) IPOption {
	return func(c *ipConfig) error {
		switch http.CanonicalHeaderKey(strings.TrimSpace(name)) {
		case "X-Forwarded-For":
			c.header = headerXFF
		case "Forwarded":
			c.header = headerForwarded
		case "X-Real-Ip":
			c.header = headerRealIP
		default:
			return fmt.Errorf("ratelimit: ProxyHeader: unsupported header %q: want X-Forwarded-For, Forwarded or X-Real-IP", name)
		}
		return nil
	}
}

// IPv6Prefix groups IPv6 clients by their first bits bits, from 1 to 128, so
// that all the addresses of a network share one bucket: the key becomes the
// prefix, such as "ip:2001:db8:1:2::/64". A /64 is usually one subscriber (a
// home, an office or a phone), and a client that owns a /64 can otherwise
// take a fresh address, and a fresh bucket, for every request; ISPs often
// assign /56 or /48, which a coarser prefix also catches at the cost of
// grouping more people. The default, like 128, keys every IPv6 address on its
// own. IPv4 addresses are never grouped.
func IPv6Prefix(bits int) IPOption {
	return func(c *ipConfig) error {
		if bits < 1 || bits > 128 {
			return fmt.Errorf("ratelimit: IPv6Prefix: %d bits out of range [1, 128]", bits)
		}
		c.v6bits = bits
		if bits == 128 {
			c.v6bits = 0
		}
		return nil
	}
}

// maxHops is the number of forwarding entries examined from the right before
// KeyByIP gives up with errNoClientIP because all of them are trusted.
const maxHops = 32

// KeyByIP returns a KeyFunc that keys requests by the client's IP address:
// "ip:203.0.113.7", "ip:2001:db8::1", or "ip:2001:db8:1:2::/64" with
// [IPv6Prefix]. Addresses are normalised first: IPv4-mapped IPv6 addresses
// become IPv4 (::ffff:192.0.2.1 is 192.0.2.1) and zones are dropped
// (fe80::1%eth0 is fe80::1), so no client has two keys.
//
// By default the client is the TCP peer, r.RemoteAddr, and forwarding
// headers are ignored: any client can write them, so believing them would let
// everybody pick its own key. Behind reverse proxies or load balancers the
// peer is the proxy; list the proxies by address or CIDR with
// [TrustedProxies] and choose their header with [ProxyHeader]. The header is
// read only when the peer is one of them.
//
// Each proxy appends the address it received the request from to the right
// of X-Forwarded-For or Forwarded, while everything to the left of the first
// entry written by one of your proxies came from the client and may be
// forged. So KeyByIP walks the list from the right, skips the addresses of
// trusted proxies, and takes the first one that is not trusted: the address
// that your outermost proxy saw. The leftmost entry, which some libraries
// use, is whatever the client wants it to be. When every entry is trusted
// the client is the leftmost one, and when the header is absent, the peer.
// At most 32 entries are examined.
//
// An address that cannot be parsed (r.RemoteAddr, or a header entry reached
// by the walk, such as "unknown" or an obfuscated RFC 7239 identifier) gives
// an error wrapping errNoClientIP, never a key built from the raw text.
//
// An IP address is a poor identity. Behind NAT and carrier-grade NAT one
// IPv4 address is shared by a whole office or by thousands of mobile
// subscribers, who then share one limit, while one IPv6 subscriber has
// billions of addresses unless grouped with [IPv6Prefix]. When requests carry
// an identity, prefer [KeyByAPIKey] or [KeyByContextValue], and keep IP
// limits, generous ones, for anonymous traffic.
//
// KeyByIP returns an error if an option is invalid.
func KeyByIP(opts ...IPOption) (KeyFunc, error) {
	c, err := newIPConfig("KeyByIP", opts)
	if err != nil {
		return nil, err
	}
	if !c.quiet.off(warnWideTrustedRange) {
		for _, p := range c.trusted {
			if p.Bits() < 8 || p.Addr().Is6() && p.Bits() < 16 {
				warn(slog.Default(), warnWideTrustedRange, "ratelimit: a trusted proxy range covers much of the internet; clients there can forge their address", "range", p.String())
			}
		}
	}
	return func(r *http.Request) (string, error) {
		if !c.quiet.off(warnForwardedWithoutTrustedProxy) && len(c.trusted) == 0 && !c.warned.Load() &&
			(r.Header["X-Forwarded-For"] != nil || r.Header["Forwarded"] != nil) && c.warned.CompareAndSwap(false, true) {
			warn(slog.Default(), warnForwardedWithoutTrustedProxy, "ratelimit: requests carry X-Forwarded-For or Forwarded but no proxy is trusted, so every client behind the proxy shares its address; see TrustedProxies")
		}
		a, err := c.clientIP(r)
		if err != nil {
			return "", err
		}
		return c.key(a), nil
	}, nil
}

// KeyByAddr returns a function that keys a client address found elsewhere,
// such as by a framework's own proxy handling, exactly as [KeyByIP] keys the
// address it finds: "ip:" followed by the address (with or without a port),
// IPv4-mapped addresses unmapped, zones dropped, IPv6 grouped by
// [IPv6Prefix]. An address that cannot be parsed gives an error wrapping
// errNoClientIP. TrustedProxies and ProxyHeader do not apply, since the
// address is already chosen; it returns the error of an invalid option.
func KeyByAddr(opts ...IPOption) (func(addr string) (string, error), error) {
	c, err := newIPConfig("KeyByAddr", opts)
	if err != nil {
		return nil, err
	}
	return func(addr string) (string, error) {
		a, ok := parseNode(addr)
		if !ok {
			return "", fmt.Errorf("%w: %q", errNoClientIP, clip(addr))
		}
		return c.key(a), nil
	}, nil
}

// newIPConfig applies opts for the function named fn.
func newIPConfig(fn string, opts []IPOption) (*ipConfig, error) {
	c := &ipConfig{}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("ratelimit: %s: nil option", fn)
		}
		if err := opt(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *ipConfig) key(a netip.Addr) string {
	var buf [64]byte
	b := append(buf[:0], "ip:"...)
	if c.v6bits > 0 && a.Is6() {
		p, _ := a.Prefix(c.v6bits) // cannot fail: a is valid, without zone, 1 ≤ bits ≤ 127
		b = p.AppendTo(b)
	} else {
		b = a.AppendTo(b)
	}
	return string(b)
}

func (c *ipConfig) clientIP(r *http.Request) (netip.Addr, error) {
	peer, ok := parseNode(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: RemoteAddr %q", errNoClientIP, clip(r.RemoteAddr))
	}
	if len(c.trusted) == 0 || !c.isTrusted(peer) {
		return peer, nil
	}
	switch c.header {
	case headerForwarded:
		return c.fromForwarded(r.Header["Forwarded"], peer)
	case headerRealIP:
		return fromRealIP(r.Header["X-Real-Ip"], peer)
	default:
		return c.fromXFF(r.Header["X-Forwarded-For"], peer)
	}
}

// fromXFF walks the X-Forwarded-For lines from the right, without copying.
func (c *ipConfig) fromXFF(lines []string, peer netip.Addr) (netip.Addr, error) {
	var last netip.Addr
	n := 0
	for li := len(lines) - 1; li >= 0; li-- {
		s := lines[li]
		for end := len(s); end >= 0; {
			start := strings.LastIndexByte(s[:end], ',') + 1
			e := trimOWS(s[start:end])
			end = start - 1
			if e == "" {
				continue // empty list elements are allowed and ignored
			}
			if n == maxHops {
				return netip.Addr{}, fmt.Errorf("%w: more than %d trusted entries in X-Forwarded-For", errNoClientIP, maxHops)
			}
			n++
			a, ok := parseNode(e)
			if !ok {
				return netip.Addr{}, fmt.Errorf("%w: X-Forwarded-For entry %q", errNoClientIP, clip(e))
			}
			if !c.isTrusted(a) {
				return a, nil
			}
			last = a
		}
	}
	if n == 0 {
		return peer, nil
	}
	return last, nil
}

// hop is the for= parameter of one Forwarded element.
type hop struct {
	v   string // the value, without its quotes
	esc bool   // v holds quoted-pairs (backslash escapes)
	bad bool   // the element is malformed
}

// hopRing keeps the last maxHops elements with a for= parameter.
type hopRing struct {
	h [maxHops]hop
	n int // elements pushed in all
}

func (r *hopRing) push(h hop) {
	r.h[r.n%maxHops] = h
	r.n++
}

func (c *ipConfig) fromForwarded(lines []string, peer netip.Addr) (netip.Addr, error) {
	var ring hopRing
	for _, s := range lines {
		scanForwarded(s, &ring)
	}
	var last netip.Addr
	for k := 0; k < ring.n; k++ {
		if k == maxHops {
			return netip.Addr{}, fmt.Errorf("%w: more than %d trusted elements in Forwarded", errNoClientIP, maxHops)
		}
		h := ring.h[(ring.n-1-k)%maxHops]
		if h.bad {
			return netip.Addr{}, fmt.Errorf("%w: malformed Forwarded element", errNoClientIP)
		}
		v := h.v
		if h.esc {
			v = unescape(v)
		}
		a, ok := parseNode(v)
		if !ok {
			return netip.Addr{}, fmt.Errorf("%w: Forwarded for=%q", errNoClientIP, clip(v))
		}
		if !c.isTrusted(a) {
			return a, nil
		}
		last = a
	}
	if ring.n == 0 {
		return peer, nil
	}
	return last, nil
}

// scanForwarded parses one line of the Forwarded field (RFC 7239 §4) and
// pushes the for= parameter of each element that has one. Quoted strings may
// hold commas and semicolons. A malformed element is pushed as bad, and
// parsing resumes after the next comma. Unquoted values are read leniently up
// to the next delimiter, because proxies often leave IPv6 addresses and ports
// unquoted.
func scanForwarded(s string, ring *hopRing) {
	i := 0
	for {
		var h hop
		has, bad := false, false
		for !bad {
			i = skipOWS(s, i)
			if i == len(s) || s[i] == ',' {
				break
			}
			if s[i] == ';' {
				i++
				continue
			}
			start := i
			for i < len(s) && isTchar(s[i]) {
				i++
			}
			name := s[start:i]
			if name == "" || i == len(s) || s[i] != '=' {
				bad = true
				break
			}
			i++
			var v string
			esc := false
			if i < len(s) && s[i] == '"' {
				i++
				start = i
				for i < len(s) && s[i] != '"' {
					if s[i] == '\\' {
						esc = true
						i++
					}
					i++
				}
				if i >= len(s) {
					bad = true
					break
				}
				v = s[start:i]
				i++
			} else {
				start = i
				for i < len(s) && !isDelim(s[i]) {
					i++
				}
				v = s[start:i]
				if v == "" {
					bad = true
					break
				}
			}
			if len(name) == 3 && strings.EqualFold(name, "for") {
				bad = has // a parameter may occur once per element
				has = true
				h = hop{v: v, esc: esc}
			}
			i = skipOWS(s, i)
			if i < len(s) && s[i] != ';' && s[i] != ',' {
				bad = true
			}
		}
		if bad {
			ring.push(hop{bad: true})
			for i < len(s) && s[i] != ',' {
				i++
			}
		} else if has {
			ring.push(h)
		}
		if i >= len(s) {
			return
		}
		i++ // the comma
	}
}

// unescape undoes the quoted-pairs of a quoted-string's content.
func unescape(v string) string {
	b := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b = append(b, v[i])
	}
	return string(b)
}

func fromRealIP(lines []string, peer netip.Addr) (netip.Addr, error) {
	switch len(lines) {
	case 0:
		return peer, nil
	case 1:
	default:
		return netip.Addr{}, fmt.Errorf("%w: %d X-Real-IP lines", errNoClientIP, len(lines))
	}
	v := trimOWS(lines[0])
	if v == "" {
		return peer, nil
	}
	a, ok := parseNode(v)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: X-Real-IP %q", errNoClientIP, clip(v))
	}
	return a, nil
}

// maxNodeLen bounds the text of an address with brackets, zone and port.
const maxNodeLen = 128

// parseNode parses an IP address, optionally with a port: "192.0.2.1",
// "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:443".
// IPv4-mapped addresses are unmapped and zones dropped. The unspecified
// addresses 0.0.0.0 and :: are not valid clients.
func parseNode(s string) (netip.Addr, bool) {
	if len(s) == 0 || len(s) > maxNodeLen {
		return netip.Addr{}, false
	}
	var a netip.Addr
	var err error
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !validPort(rest[1:])) {
			return netip.Addr{}, false
		}
		a, err = netip.ParseAddr(s[1:end])
		if err != nil || !a.Is6() {
			return netip.Addr{}, false
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		// One colon: IPv4 and a port. An IPv6 address has at least two.
		if !validPort(s[i+1:]) {
			return netip.Addr{}, false
		}
		a, err = netip.ParseAddr(s[:i])
		if err != nil || !a.Is4() {
			return netip.Addr{}, false
		}
	} else if a, err = netip.ParseAddr(s); err != nil {
		return netip.Addr{}, false
	}
	a = a.Unmap().WithZone("")
	if a.IsUnspecified() {
		return netip.Addr{}, false
	}
	return a, true
}

// validPort reports whether p is a port number or an RFC 7239 obfuscated
// port ("_" followed by ALPHA, DIGIT, ".", "_" or "-").
func validPort(p string) bool {
	if p == "" {
		return false
	}
	if p[0] == '_' {
		if len(p) == 1 {
			return false
		}
		for _, c := range []byte(p[1:]) {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return true
	}
	if len(p) > 5 {
		return false
	}
	_, err := strconv.ParseUint(p, 10, 16)
	return err == nil
}

func isOWS(c byte) bool { return c == ' ' || c == '\t' }

func skipOWS(s string, i int) int {
	for i < len(s) && isOWS(s[i]) {
		i++
	}
	return i
}

func trimOWS(s string) string {
	for len(s) > 0 && isOWS(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isOWS(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

// isDelim reports whether c ends an unquoted Forwarded value.
func isDelim(c byte) bool {
	return c == ';' || c == ',' || c == '"' || isOWS(c)
}

// isTchar reports whether c may appear in an RFC 9110 token.
func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// clip shortens attacker-supplied text quoted in error messages.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// JoinKeys joins key parts into one key without ambiguity, for composite
// keys such as a route and a client: each part is written as its length in
// bytes, a colon, and the part itself, so that different lists of parts
// never give the same key.
//
//	JoinKeys("abc", "de")  // "3:abc2:de"
//	JoinKeys("a:b", "c")   // "3:a:b1:c"
//	JoinKeys("a", "b:c")   // "1:a3:b:c"
//
// JoinKeys() is the empty string, which a [Limiter] refuses.
func JoinKeys(parts ...string) string {
	if len(parts) == 0 {
		return ""
	}
	n := 0
	for _, p := range parts {
		n += len(p) + 1 + decimalLen(len(p))
	}
	var sb strings.Builder
	sb.Grow(n)
	var num [20]byte
	for _, p := range parts {
		sb.Write(strconv.AppendInt(num[:0], int64(len(p)), 10))
		sb.WriteByte(':')
		sb.WriteString(p)
	}
	return sb.String()
}

func decimalLen(n int) int {
	d := 1
	for n >= 10 {
		n /= 10
		d++
	}
	return d
}

// JoinKeyFuncs returns a KeyFunc that calls every function of fs and joins
// their keys with [JoinKeys], for limits per route and client, or per tenant
// and user. It fails with the first error, and with an error wrapping
// ErrMissingKey when a function returns an empty key without an error. A nil
// function makes every call fail.
func JoinKeyFuncs(fs ...KeyFunc) KeyFunc {
	fs = append([]KeyFunc(nil), fs...)
	return func(r *http.Request) (string, error) {
		var buf [4]string
		parts := buf[:0]
		for i, f := range fs {
			if f == nil {
				return "", fmt.Errorf("ratelimit: JoinKeyFuncs: key function %d is nil", i)
			}
			k, err := f(r)
			if err != nil {
				return "", err
			}
			if k == "" {
				return "", fmt.Errorf("%w: from key function %d of JoinKeyFuncs", ErrMissingKey, i)
			}
			parts = append(parts, k)
		}
		return JoinKeys(parts...), nil
	}
}
