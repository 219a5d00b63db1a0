package ratelimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/tokenfair/ratelimit/internal/clientkey"
	"github.com/tokenfair/ratelimit/internal/sfv"
)

// maxHops is the number of forwarding entries examined from the right before
// KeyByIP gives up with errNoClientIP because all of them are trusted.
const maxHops = 32

// The refusals of forwarding entries, reached by the walk, that name no
// client: a malformed Forwarded element, one without for= (or empty), an
// empty X-Forwarded-For entry, an empty X-Real-IP. Skipping such an entry
// would believe the one to its left, which the client may have written.
var (
	errMalformedForwarded = noClientIP("the trusted proxy sent a malformed Forwarded element",
		fmt.Errorf("%w: malformed Forwarded element", errNoClientIP))
	errForwardedWithoutFor = noClientIP("the trusted proxy sent a Forwarded element without for=",
		fmt.Errorf("%w: Forwarded element without for=", errNoClientIP))
	errEmptyXFF = noClientIP("the trusted proxy sent an empty X-Forwarded-For entry",
		fmt.Errorf("%w: empty X-Forwarded-For entry", errNoClientIP))
	errEmptyRealIP = noClientIP("the trusted proxy sent an empty X-Real-IP header",
		fmt.Errorf("%w: empty X-Real-IP", errNoClientIP))
)

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

// fromXFF walks the X-Forwarded-For lines from the right, without copying:
// the lines of a field are one comma-separated list (RFC 9110 §5.3), so the
// last entry of the last line is the one the nearest proxy appended.
func (c *ipConfig) fromXFF(lines []string, peer netip.Addr) (netip.Addr, error) {
	var last netip.Addr // the leftmost trusted entry so far: the client if all are trusted
	n := 0              // entries examined
	for li := len(lines) - 1; li >= 0; li-- {
		s := lines[li]
		// s[start:end] is the entry under examination: end is where the
		// previous one (to its right) began, less its comma, and start the
		// byte after the comma before it, or 0. end = -1 ends the line;
		// an empty line is one empty entry, which names no client.
		for end := len(s); end >= 0; {
			start := strings.LastIndexByte(s[:end], ',') + 1
			e := trimOWS(s[start:end])
			end = start - 1
			if n == maxHops {
				return netip.Addr{}, noClientIP("the X-Forwarded-For header holds more than "+strconv.Itoa(maxHops)+" entries from trusted proxies",
					fmt.Errorf("%w: more than %d trusted entries in X-Forwarded-For", errNoClientIP, maxHops))
			}
			n++
			if e == "" {
				return netip.Addr{}, errEmptyXFF
			}
			a, ok := clientkey.ParseAddr(e)
			if !ok {
				return netip.Addr{}, noClientIP("the trusted proxy sent an X-Forwarded-For entry that is not an IP address",
					fmt.Errorf("%w: X-Forwarded-For entry %q", errNoClientIP, clientkey.Clip(e)))
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
	v     string // the value, without its quotes
	esc   bool   // v holds quoted-pairs (backslash escapes)
	bad   bool   // the element is malformed
	noFor bool   // the element has no for= parameter, or is empty
}

// hopRing keeps the last maxHops Forwarded elements, the only ones the walk
// from the right can reach. Forwarded must be parsed from the left, since a
// quoted string may hold commas, so the parser pushes every element and the
// ring overwrites the oldest: a header of any length costs a fixed array on
// the stack, no allocation. Element k from the right (k < min(n, maxHops))
// is h[(n-1-k) % maxHops].
type hopRing struct {
	h [maxHops]hop
	n int // elements pushed in all, which may exceed maxHops
}

func (r *hopRing) push(h hop) {
	r.h[r.n%maxHops] = h
	r.n++
}

// fromForwarded walks the Forwarded lines' elements from the right, as
// fromXFF walks X-Forwarded-For: a malformed element, or one without for=,
// ends the walk with an error, since skipping it would believe the element
// to its left.
func (c *ipConfig) fromForwarded(lines []string, peer netip.Addr) (netip.Addr, error) {
	var ring hopRing
	for _, s := range lines {
		scanForwarded(s, &ring)
	}
	var last netip.Addr
	for k := 0; k < ring.n; k++ {
		if k == maxHops {
			return netip.Addr{}, noClientIP("the Forwarded header holds more than "+strconv.Itoa(maxHops)+" elements from trusted proxies",
				fmt.Errorf("%w: more than %d trusted elements in Forwarded", errNoClientIP, maxHops))
		}
		h := ring.h[(ring.n-1-k)%maxHops]
		switch {
		case h.bad:
			return netip.Addr{}, errMalformedForwarded
		case h.noFor:
			return netip.Addr{}, errForwardedWithoutFor
		}
		v := h.v
		if h.esc {
			v = unescape(v)
		}
		a, ok := clientkey.ParseAddr(v)
		if !ok {
			return netip.Addr{}, noClientIP("the trusted proxy sent a Forwarded for= parameter that is not an IP address",
				fmt.Errorf("%w: Forwarded for=%q", errNoClientIP, clientkey.Clip(v)))
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

// scanForwarded parses one line of the Forwarded field and pushes each of
// its elements, left to right: its for= parameter, or that it has none (an
// empty element included), or that it is malformed. The grammar is RFC 7239
// §4's:
//
//	Forwarded         = forwarded-element *( OWS "," OWS forwarded-element )
//	forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
//	forwarded-pair    = token "=" value
//	value             = token / quoted-string
//
// with one leniency: an unquoted value runs to the next delimiter (isDelim),
// not to the end of a token, because proxies often leave IPv6 addresses and
// ports unquoted (for=[2001:db8::1]:80), which a token cannot hold. A
// quoted string may hold commas and semicolons. Pairs other than for= (by,
// proto, host) are checked for syntax only. A malformed element, or one
// with two for= pairs, is pushed as bad, and parsing resumes after the next
// comma.
//
// i is the cursor: the first byte of s not yet consumed. The outer loop
// reads one element and leaves i on the comma after it (or at len(s)); the
// inner loop reads one pair, with start marking where its name, then its
// value, begins; has records that the element held a for= pair, h its value.
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
			for i < len(s) && sfv.IsTChar(s[i]) {
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
					if s[i] == '\\' { // a quoted-pair: the next byte, even '"', is content
						esc = true
						i++
					}
					i++
				}
				if i >= len(s) { // no closing quote (i may be len(s)+1 after a final '\\')
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
				bad = true // text after the value: for=a b, or for="a"b
			}
		}
		if bad {
			ring.push(hop{bad: true})
			for i < len(s) && s[i] != ',' {
				i++
			}
		} else if has {
			ring.push(h)
		} else {
			ring.push(hop{noFor: true})
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
		return netip.Addr{}, noClientIP(fmt.Sprintf("the request carries %d X-Real-IP lines, not one", len(lines)),
			fmt.Errorf("%w: %d X-Real-IP lines", errNoClientIP, len(lines)))
	}
	v := trimOWS(lines[0])
	if v == "" {
		return netip.Addr{}, errEmptyRealIP
	}
	a, ok := clientkey.ParseAddr(v)
	if !ok {
		return netip.Addr{}, noClientIP("the trusted proxy sent an X-Real-IP header that is not an IP address",
			fmt.Errorf("%w: X-Real-IP %q", errNoClientIP, clientkey.Clip(v)))
	}
	return a, nil
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
