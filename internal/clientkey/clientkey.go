// Package clientkey builds the keys of clients shared by the ratelimit
// package and its framework adapters, so that one client has the same key
// whichever of them serves it: "ip:" keys for client addresses and "user:"
// keys for user IDs.
package clientkey

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
)

// Keys makes the keys of clients (FromUser, FromIP), whose refusals wrap
// its errors: ratelimit's ErrMissingKey and ErrBadRequest, which its
// callers pass in, since this package cannot import ratelimit.
type Keys struct{ MissingKey, BadRequest error }

// Error is a refusal of a request that explains itself safely. Its text,
// for logs, names the cause and the value at fault; Detail, for the
// client, is one sentence that quotes no header value, no key and no
// secret, only header names, type names, numbers and policy names.
type Error struct {
	Err       error  // the full error, wrapping a sentinel (see Keys)
	Kind      Kind   // the kind of refusal
	Detail    string // what was wrong, safe to show the client
	Challenge string // for a missing key: the WWW-Authenticate challenge; "" for the default
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Kind names a kind of refusal, so that the first of each kind is logged
// where a developer sees it.
type Kind uint8

// The kinds of refusal.
const (
	KindMissingKey     Kind = iota // no identity in the request
	KindEmptyKey                   // a key function returned an empty key
	KindClientIP                   // no usable client address
	KindCost                       // the cost function failed, or the cost is negative
	KindCostAboveBurst             // a cost above a policy's burst
	KindBadRequest                 // another ErrBadRequest
	KindUserIDType                 // a user ID of a type that cannot be a key: the server's mistake
	KindLimitFor                   // Policy.LimitFor gave a limit the policy cannot apply: the server's mistake
	NumKinds
)

var kindNames = [NumKinds]string{"missing-key", "empty-key", "client-ip", "cost", "cost-above-burst", "bad-request", "user-id-type", "limit-for"}

func (k Kind) String() string {
	if k < NumKinds {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// hashedLen is the length of Hash's digest: 16 bytes of SHA-256 in
// unpadded base64url.
var hashedLen = base64.RawURLEncoding.EncodedLen(16)

// Hash returns prefix followed by the unpadded base64url encoding of the
// first 16 bytes of the SHA-256 of v, built with a single allocation.
func Hash(prefix, v string) string {
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
	b = append(b, make([]byte, hashedLen)...) // in buf for a prefix of up to 10 bytes
	base64.RawURLEncoding.Encode(b[n:], sum[:16])
	return string(b)
}

// MaxUserIDLen is the longest user ID that User keeps as is.
const MaxUserIDLen = 128

// FromUser returns the key of the user ID v, "user:" and the ID, for the types
// of ID that authentication libraries store: a string; an integer of any
// size, in decimal (so 42 and "42" are one ID, "user:42"); a [fmt.Stringer];
// or a [16]byte, such as a UUID, in the canonical 8-4-4-4-12 lowercase hex
// form; or a named type of one of them (type UserID string). An ID longer
// than MaxUserIDLen is hashed: "user#:" and its Hash. No value or an empty
// ID gives an *Error wrapping s.MissingKey. A value of another type is the
// server's mistake: an *Error of KindUserIDType, wrapping no sentinel,
// whose text names the type, never the value.
func (s Keys) FromUser(v any) (string, error) {
	var id string
	switch v := v.(type) {
	case nil:
		return "", s.noUser("no user ID in the request's context", "the request carries no user ID in its context")
	case string:
		id = v
	case int:
		id = strconv.FormatInt(int64(v), 10)
	case int8:
		id = strconv.FormatInt(int64(v), 10)
	case int16:
		id = strconv.FormatInt(int64(v), 10)
	case int32:
		id = strconv.FormatInt(int64(v), 10)
	case int64:
		id = strconv.FormatInt(v, 10)
	case uint:
		id = strconv.FormatUint(uint64(v), 10)
	case uint8:
		id = strconv.FormatUint(uint64(v), 10)
	case uint16:
		id = strconv.FormatUint(uint64(v), 10)
	case uint32:
		id = strconv.FormatUint(uint64(v), 10)
	case uint64:
		id = strconv.FormatUint(v, 10)
	case uintptr:
		id = strconv.FormatUint(uint64(v), 10)
	case fmt.Stringer: // before [16]byte: a UUID type's String is its canonical form
		id = v.String()
	case [16]byte:
		id = uuid(v)
	default:
		var ok bool
		if id, ok = named(v); !ok {
			return "", &Error{
				Err:    fmt.Errorf("ratelimit: the user ID in the request's context is a %T, not a string, integer, fmt.Stringer or [16]byte", v),
				Kind:   KindUserIDType,
				Detail: "the rate limit could not be checked",
			}
		}
	}
	switch {
	case id == "":
		return "", s.noUser("the user ID in the request's context is empty", "the user ID in the request's context is empty")
	case len(id) > MaxUserIDLen:
		return Hash("user#:", id), nil
	}
	return "user:" + id, nil
}

// noUser is FromUser's refusal of a missing or empty ID, which quotes no value.
func (s Keys) noUser(msg, detail string) *Error {
	return &Error{Err: fmt.Errorf("%w: %s", s.MissingKey, msg), Kind: KindMissingKey, Detail: detail, Challenge: "Bearer"}
}

// named returns the ID held by v, of a named type whose underlying type is
// a string, an integer or a [16]byte, as FromUser writes the underlying value.
func named(v any) (string, bool) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String:
		return rv.String(), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(rv.Uint(), 10), true
	case reflect.Array:
		if rv.Len() != 16 || rv.Type().Elem().Kind() != reflect.Uint8 {
			return "", false
		}
		var b [16]byte
		reflect.Copy(reflect.ValueOf(&b).Elem(), rv)
		return uuid(b), true
	}
	return "", false
}

// uuid formats b as 8-4-4-4-12 lowercase hex digits.
func uuid(b [16]byte) string {
	const hex = "0123456789abcdef"
	var buf [36]byte
	j := 0
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			buf[j] = '-'
			j++
		}
		buf[j], buf[j+1] = hex[c>>4], hex[c&0xf]
		j += 2
	}
	return string(buf[:])
}

// DefaultIPv6Prefix is the length of the prefix by which IPv6 clients are
// grouped when IPOptions.IPv6Prefix is 0: a /64, the smallest network any
// subscriber is given, in which privacy extensions rotate its address.
const DefaultIPv6Prefix = 64

// IPv6Bits checks the IPv6Prefix field of ratelimit.IPOptions and returns
// the number of bits by which IPv6 addresses are grouped, 0 for none (a
// prefix of 128).
func IPv6Bits(prefix int) (int, error) {
	switch {
	case prefix < 0 || prefix > 128:
		return 0, fmt.Errorf("IPv6Prefix %d: want 1 to 128, or 0 for the default, %d", prefix, DefaultIPv6Prefix)
	case prefix == 0:
		return DefaultIPv6Prefix, nil
	case prefix == 128:
		return 0, nil
	}
	return prefix, nil
}

// Addr returns the key of a, a valid address without zone that is not
// IPv4-mapped: "ip:" and the address, or, for an IPv6 address with bits
// (from IPv6Bits) not 0, "ip:" and its prefix of that length.
func Addr(a netip.Addr, bits int) string {
	var buf [64]byte
	b := append(buf[:0], "ip:"...)
	if bits > 0 && a.Is6() {
		p, _ := a.Prefix(bits) // cannot fail: a is valid, without zone, 1 ≤ bits ≤ 127
		b = p.AppendTo(b)
	} else {
		b = a.AppendTo(b)
	}
	return string(b)
}

// FromIP returns the key of the address s, with or without a port (see
// ParseAddr), grouped by bits as by Addr. An address that cannot be parsed
// gives an *Error wrapping e.BadRequest.
func (e Keys) FromIP(s string, bits int) (string, error) {
	a, ok := ParseAddr(s)
	if !ok {
		return "", &Error{
			Err:    fmt.Errorf("%w: no valid client IP: %q", e.BadRequest, Clip(s)),
			Kind:   KindClientIP,
			Detail: "the request's client address is not an IP address",
		}
	}
	return Addr(a, bits), nil
}

// maxAddrLen bounds the text of an address with brackets, zone and port.
const maxAddrLen = 128

// ParseAddr parses an IP address, optionally with a port: "192.0.2.1",
// "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]" or "[2001:db8::1]:443".
// IPv4-mapped addresses are unmapped and zones dropped. The unspecified
// addresses 0.0.0.0 and :: are not valid clients.
func ParseAddr(s string) (netip.Addr, bool) {
	if len(s) == 0 || len(s) > maxAddrLen {
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

// Clip shortens attacker-supplied text quoted in error messages.
func Clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
