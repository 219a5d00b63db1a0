package ratelimit

import (
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"strconv"
	"strings"

	"github.com/tokenfair/ratelimit/internal/clientkey"
	"github.com/tokenfair/ratelimit/internal/sfv"
)

// KeyFunc returns the key that identifies the client of a request: requests
// with the same key share a bucket. It returns an error wrapping
// ErrMissingKey when the request carries no identity; an empty key with a
// nil error is refused the same way. A KeyFunc is called by many goroutines
// at once; the ones this package returns are safe for concurrent use.
type KeyFunc func(r *http.Request) (string, error)

// KeyByAPIKey returns a KeyFunc that keys requests by the API key in the
// header field named header, such as "X-API-Key": "ak:" and 16 bytes of its
// unsalted SHA-256 (fit for random tokens, not passwords), so stores never
// hold the secret; docs/keys.md says which spellings are one client. A
// missing or empty field gives an error wrapping ErrMissingKey, two lines
// of it one wrapping ErrBadRequest. It does not check that the API key is
// valid: run it after authentication. It panics when header is not a
// header field name.
func KeyByAPIKey(header string) KeyFunc {
	trimmed := strings.TrimSpace(header)
	if !isToken(trimmed) {
		panic(fmt.Errorf("ratelimit: KeyByAPIKey(%q): not a header field name, such as X-API-Key", header))
	}
	header = trimmed
	name := http.CanonicalHeaderKey(header)
	c := &apiKeyCache{seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed()}
	if name == "Authorization" {
		c.canonical = canonicalAuthorization
	}
	missing, empty := apiKeyErrors(header)
	return func(r *http.Request) (string, error) {
		vs := r.Header[name]
		switch {
		case len(vs) == 0:
			return "", missing
		case len(vs) > 1:
			return "", &clientkey.Error{Err: fmt.Errorf("%w: %d %s lines", ErrBadRequest, len(vs), header),
				Kind: clientkey.KindBadRequest, Detail: fmt.Sprintf("the request carries %d %s lines, not one", len(vs), header)}
		}
		if v := strings.TrimSpace(vs[0]); v != "" {
			return c.key(v), nil
		}
		return "", empty
	}
}

// KeyOfAPIKey returns the key that KeyByAPIKey(header) gives a request
// whose field header holds apiKey, to index a table for Policy.LimitFor
// without holding the secret. For Authorization, apiKey is the whole value
// ("Bearer t"). An empty apiKey gives a key that no request gets.
func KeyOfAPIKey(header, apiKey string) string {
	v := strings.TrimSpace(apiKey)
	if http.CanonicalHeaderKey(strings.TrimSpace(header)) == "Authorization" {
		v = canonicalAuthorization(v)
	}
	return clientkey.Hash("ak:", v)
}

// canonicalAuthorization returns the one spelling of the Authorization
// field value v, which has no surrounding whitespace: the scheme in lower
// case, one space, and the credentials, outside quoted strings without the
// whitespace next to a comma or an equals sign and with other runs of
// whitespace made one space. A v without whitespace is returned as it is.
func canonicalAuthorization(v string) string {
	i := strings.IndexAny(v, " \t")
	if i < 0 {
		return v
	}
	b := make([]byte, 0, len(v))
	for _, c := range []byte(v[:i]) {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	b = append(b, ' ')
	quoted, space := false, false
	for j := skipOWS(v, i); j < len(v); j++ {
		c := v[j]
		switch {
		case quoted:
			if c == '\\' && j+1 < len(v) {
				b = append(b, c)
				j++
				c = v[j]
			} else if c == '"' {
				quoted = false
			}
		case isOWS(c):
			space = true
			continue
		default:
			if last := b[len(b)-1]; space && c != ',' && c != '=' && last != ',' && last != '=' {
				b = append(b, ' ')
			}
			space, quoted = false, c == '"'
		}
		b = append(b, c)
	}
	return string(b)
}

// apiKeyErrors returns the refusals of KeyByAPIKey(header): no field, and
// an empty one. They quote the header's name, never its value.
func apiKeyErrors(header string) (missing, empty error) {
	challenge := `ApiKey in="header", name="` + header + `"`
	if strings.EqualFold(header, "Authorization") {
		challenge = "Bearer"
	}
	describe := func(detail string) error {
		return &clientkey.Error{Err: fmt.Errorf("%w: %s", ErrMissingKey, detail), Kind: clientkey.KindMissingKey,
			Detail: detail, Challenge: challenge}
	}
	return describe("the request carries no " + header + " header"), describe("the request's " + header + " header is empty")
}

// isToken reports whether s is an RFC 9110 token, such as a header name.
func isToken(s string) bool {
	for _, c := range []byte(s) {
		if !sfv.IsTChar(c) {
			return false
		}
	}
	return s != ""
}

// apiKeyCache remembers the keys of the API keys seen lately, so that a
// busy client costs one SHA-256 in all, not one a request. It holds no
// secret: an API key is known by two 64-bit hashes of it under seeds drawn
// in this process, which nobody outside can aim at.
type apiKeyCache struct {
	seed1, seed2 maphash.Seed
	canonical    func(string) string // the one spelling of a secret; nil: as it is
	recent[[2]uint64, string]
}

// key returns the key of the API key secret: "ak:" and the hash of its
// canonical spelling. The cache holds each spelling seen, so that only a
// miss pays for the canonical one.
func (c *apiKeyCache) key(secret string) string {
	h := [2]uint64{maphash.String(c.seed1, secret), maphash.String(c.seed2, secret)}
	if key, ok := c.get(h, h[0]); ok {
		return key
	}
	spelled := secret
	if c.canonical != nil {
		spelled = c.canonical(secret)
	}
	key := clientkey.Hash("ak:", spelled)
	c.put(h, h[0], key)
	return key
}

// KeyByContextValue returns a KeyFunc that keys requests by the user ID
// that an earlier middleware stored in the request's context under ctxKey:
// a non-empty string, an integer, a [fmt.Stringer], a [16]byte (a UUID), or
// a named type of one of them, keyed "user:ID" (docs/keys.md). No value or
// an empty ID gives an error wrapping ErrMissingKey; a value of another
// type, an error naming it (500 by default). It panics when ctxKey is nil.
func KeyByContextValue(ctxKey any) KeyFunc {
	if ctxKey == nil {
		panic(errors.New("ratelimit: KeyByContextValue: nil context key"))
	}
	under := fmt.Sprintf("KeyByContextValue(%#v)", ctxKey)
	return func(r *http.Request) (string, error) {
		id, err := clientKeys.FromUser(r.Context().Value(ctxKey))
		if err != nil {
			return "", fmt.Errorf("%w (%s)", err, under)
		}
		return id, nil
	}
}

// KeyByIP returns a KeyFunc that keys requests by the client's address,
// "ip:203.0.113.7", or for IPv6 its network, "ip:2001:db8:1:2::/64". The
// client is the TCP peer, unless the peer is a trusted proxy: then
// opts.Header is walked from the right, skipping trusted proxies
// (docs/keys.md#behind-a-proxy). An address that does not parse, or a
// walked entry that names no client, gives an error wrapping ErrBadRequest,
// never a key. opts may be nil; an invalid opts is an error naming the
// field and value. The KeyFunc is safe for concurrent use.
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

// joinKeys joins key parts into one key without ambiguity, for composite
// keys such as a route and a client: each part is written as its length in
// bytes, a colon, and the part itself, so that different lists of parts
// never give the same key.
//
//	joinKeys("abc", "de")  // "3:abc2:de"
//	joinKeys("a:b", "c")   // "3:a:b1:c"
//	joinKeys("a", "b:c")   // "1:a3:b:c"
//
// joinKeys() is the empty string, which a [Limiter] refuses.
func joinKeys(parts ...string) string {
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

// JoinKeyFuncs returns a KeyFunc that joins the keys of fs, each after its
// length ("3:abc2:de"), so that no two lists collide: for limits per route
// and client, say. It fails with the first error, or one wrapping
// ErrMissingKey for an empty key; it panics if fs is empty or holds nil.
func JoinKeyFuncs(fs ...KeyFunc) KeyFunc {
	if len(fs) == 0 {
		panic(errors.New("ratelimit: JoinKeyFuncs: no key function"))
	}
	for i, f := range fs {
		if f == nil {
			panic(fmt.Errorf("ratelimit: JoinKeyFuncs: key function %d is nil", i))
		}
	}
	fs = append([]KeyFunc(nil), fs...)
	return func(r *http.Request) (string, error) {
		var buf [4]string
		parts := buf[:0]
		for i, f := range fs {
			k, err := f(r)
			if err != nil {
				return "", err
			}
			if k == "" {
				return "", &clientkey.Error{Err: fmt.Errorf("%w: from key function %d of JoinKeyFuncs", ErrMissingKey, i),
					Kind: clientkey.KindEmptyKey, Detail: "a key function returned an empty key"}
			}
			parts = append(parts, k)
		}
		return joinKeys(parts...), nil
	}
}

// clientKeys makes clientkey's refusals wrap this package's errors.
var clientKeys = clientkey.Keys{MissingKey: ErrMissingKey, BadRequest: ErrBadRequest}
