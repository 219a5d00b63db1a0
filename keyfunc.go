package ratelimit

import (
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"strconv"
	"strings"

	"github.com/tokenfair/ratelimit/internal/clientkey"
)

// KeyFunc returns the key that identifies the client of a request: requests
// with the same key share a bucket. It returns ErrMissingKey when the request
// carries no identity. An empty key with a nil error is refused by the
// middleware (ErrMissingKey), never turned into one bucket shared by everybody.
// A KeyFunc is called by many goroutines at once; the ones this package
// returns are safe for concurrent use.
type KeyFunc func(r *http.Request) (string, error)

// KeyByAPIKey returns a KeyFunc that keys requests by the API key in the
// request header field named header, such as "X-API-Key", with surrounding
// spaces removed. A missing or empty field gives an error wrapping
// ErrMissingKey. Two lines of the field give an error wrapping
// ErrBadRequest (400): the authentication could read another line than
// the limiter. The default error
// handler answers it with 401, a problem detail naming the header ("the
// request carries no X-API-Key header") and the challenge
// WWW-Authenticate: ApiKey in="header", name="X-API-Key", the fields of an
// OpenAPI apiKey security scheme; Bearer when header is Authorization (see
// MiddlewareOptions.Challenge).
//
// For header Authorization the key is that of the credentials, whatever the
// spelling of their scheme, which is case-insensitive, and of the
// whitespace that the grammar allows (RFC 9110 §11.4): "Bearer t",
// "bearer t", "BEARER t" and "Bearer \t t" are one client, "bearer t";
// "Bearer T" is another, as the credentials keep their case, and so do
// quoted strings, whitespace included. Outside quoted strings, the
// whitespace around the commas and equals signs of auth-parameters
// (`Digest username="a", realm="b"`) is dropped. A value without
// whitespace is taken as it is.
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
//
// KeyByAPIKey panics, with an error that names the value, when header is
// not a field name (an RFC 9110 token: empty, or with a space, a colon or
// another separator): no request could carry the field, so every request
// would be refused.
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
		if !isTchar(c) {
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

// KeyByContextValue returns a KeyFunc that keys requests by a user ID that an
// earlier middleware, usually the authentication middleware, stored in the
// request's context under ctxKey. The ID may be any of the types that
// authentication libraries store: a non-empty string; an integer of any
// size (int, int64, uint64, ...); a [fmt.Stringer] whose String method
// returns a non-empty string; a [16]byte, such as a UUID; or a named type
// of one of them (type UserID string). No value or an empty ID gives an
// error wrapping ErrMissingKey, which the default error handler answers
// with 401, a problem detail ("the request carries no user ID in its
// context") and WWW-Authenticate: Bearer (see MiddlewareOptions.Challenge). A value
// of another type is the server's mistake, not the client's: an error
// that wraps neither ErrMissingKey nor ErrBadRequest and names the type
// ("the user ID in the request's context is a map[string]int, not a
// string, integer, fmt.Stringer or [16]byte"), which the default error
// handler answers with 500 and logs once, at the error level.
//
// The key is "user:" followed by the ID. An ID is an ID whatever its type:
// integers are written in decimal, so the int 42, the string "42" and
// UserID("42") are one user, "user:42"; a [16]byte is written in the canonical 8-4-4-4-12
// lowercase hex form of UUIDs, which is also what UUID types' String
// methods return. An ID longer than 128 bytes is
// hashed as by [KeyByAPIKey] so that keys stay short: its key is "user#:"
// followed by 22 characters of base64url SHA-256. The two forms never
// collide.
//
// It panics when ctxKey is nil, which no context can hold a value under
// (context.WithValue panics on it too).
func KeyByContextValue(ctxKey any) KeyFunc {
	if ctxKey == nil {
		panic(errors.New("ratelimit: KeyByContextValue: nil context key"))
	}
	return func(r *http.Request) (string, error) { return keyErrors.User(r.Context().Value(ctxKey)) }
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

// JoinKeyFuncs returns a KeyFunc that calls every function of fs and joins
// their keys, each after its length ("3:abc2:de"), so that no two lists of
// keys give the same key: for limits per route and client, or per tenant
// and user. It fails with the first error, and with an error wrapping
// ErrMissingKey when a function returns an empty key without an error. It
// panics, with an error that says so, when fs is empty or holds a nil
// function.
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

// keyErrors makes clientkey's refusals wrap this package's errors.
var keyErrors = clientkey.Sentinels{MissingKey: ErrMissingKey, BadRequest: ErrBadRequest}
