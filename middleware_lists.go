package ratelimit

// The address lists of MiddlewareOptions.Block and MiddlewareOptions.Safe.

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// verdict is what the address lists say of a request's client.
type verdict uint8

const (
	unlisted verdict = iota // neither blocked nor safe: limited as usual
	blocked                 // answered 403
	safe                    // neither limited nor counted
)

// addrLists is the validated form of MiddlewareOptions.Block, Safe and ClientIP.
type addrLists struct {
	ip          *ipConfig
	block, safe prefixSet
}

// newAddrLists checks the lists of o and returns nil when both are empty.
func newAddrLists(o *MiddlewareOptions) (*addrLists, error) {
	l := new(addrLists)
	var err error
	if l.block, err = newPrefixSet("MiddlewareOptions.Block", o.Block); err != nil {
		return nil, err
	}
	if l.safe, err = newPrefixSet("MiddlewareOptions.Safe", o.Safe); err != nil {
		return nil, err
	}
	// ClientIP is checked even without lists, so that a mistake in it is
	// not found only on the day a list is added.
	if l.ip, err = newIPConfig("MiddlewareOptions.ClientIP", o.ClientIP); err != nil {
		return nil, err
	}
	if l.block.empty() && l.safe.empty() {
		return nil, nil
	}
	if l.ip.logger == nil {
		l.ip.logger = o.Logger
	}
	l.ip.warnWide()
	return l, nil
}

// classify finds the client of r as KeyByIP does, and says whether it is
// blocked or safe; a client in both lists is blocked. The error is
// KeyByIP's when the client cannot be found.
func (l *addrLists) classify(r *http.Request) (verdict, error) {
	a, err := l.ip.clientAddr(r)
	switch {
	case err != nil:
		return unlisted, err
	case l.block.contains(a):
		return blocked, nil
	case l.safe.contains(a):
		return safe, nil
	}
	return unlisted, nil
}

// prefixSet is a set of CIDR prefixes. An address is looked up once for
// each distinct prefix length, so that a long list costs no more than a
// short one.
type prefixSet struct {
	bits4, bits6 []int // the lengths of the IPv4 and of the IPv6 prefixes, ascending
	set          map[netip.Prefix]struct{}
}

// newPrefixSet parses entries, written as IPOptions.TrustedProxies: CIDR
// prefixes or single addresses, normalised (masked, IPv4-mapped IPv6
// prefixes in their IPv4 form), empty entries skipped. Its errors name
// field and the entry at fault.
func newPrefixSet(field string, entries []string) (prefixSet, error) {
	var s prefixSet
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		p, err := parseTrusted(e)
		if err != nil {
			return prefixSet{}, fmt.Errorf("ratelimit: %s entry %q: want a CIDR prefix or an IP address", field, e)
		}
		if s.set == nil {
			s.set = make(map[netip.Prefix]struct{})
		}
		s.set[p] = struct{}{}
		bits := &s.bits6
		if p.Addr().Is4() {
			bits = &s.bits4
		}
		if !slices.Contains(*bits, p.Bits()) {
			*bits = append(*bits, p.Bits())
		}
	}
	slices.Sort(s.bits4)
	slices.Sort(s.bits6)
	return s, nil
}

func (s *prefixSet) empty() bool { return len(s.set) == 0 }

// contains reports whether a, unmapped and without a zone, is in one of
// the prefixes of s.
func (s *prefixSet) contains(a netip.Addr) bool {
	bits := s.bits6
	if a.Is4() {
		bits = s.bits4
	}
	for _, b := range bits {
		p, _ := a.Prefix(b) // b is at most a's length
		if _, ok := s.set[p]; ok {
			return true
		}
	}
	return false
}

// forbid answers a request from a blocked client.
func forbid(w http.ResponseWriter) {
	writeProblem(w, http.StatusForbidden, "about:blank", "Forbidden", "the client's address is blocked", nil)
}
