package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit/internal/clientkey"
)

func TestKeyByAPIKey(t *testing.T) {
	kf := KeyByAPIKey("x-api-key")
	key := func(values ...string) (string, error) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		for _, v := range values {
			r.Header.Add("X-API-Key", v)
		}
		return kf(r)
	}
	const secret = "sk_live_0123456789abcdef"
	k1, err := key(secret)
	require.NoError(t, err, "KeyByAPIKey(%q)", secret)

	t.Run("hashed", func(t *testing.T) {
		assert.True(t, strings.HasPrefix(k1, "ak:"), "key %q lacks prefix ak:", k1)
		assert.Len(t, k1, 25, "key %q", k1)
		assert.NotContains(t, k1, secret, "key holds the secret")
		assert.NotContains(t, k1, secret[:8], "key holds part of the secret")
	})
	t.Run("stable", func(t *testing.T) {
		k2, err := key(secret)
		require.NoError(t, err)
		assert.Equal(t, k1, k2, "same secret, different keys")
		k3, err := key("  " + secret + " ")
		require.NoError(t, err)
		assert.Equal(t, k1, k3, "spaces around the secret change the key")
	})
	// Two lines: which one counts is ambiguous (the authentication may read
	// another one than the limiter), so the request is refused.
	t.Run("two lines", func(t *testing.T) {
		for _, lines := range [][]string{{secret, "other"}, {secret, secret}, {"", secret}} {
			k, err := key(lines...)
			assert.ErrorIs(t, err, ErrBadRequest, "KeyByAPIKey(%q) = %q, %v", lines, k, err)
			assert.NotErrorIs(t, err, ErrMissingKey, "%q", lines)
			assert.Empty(t, k)
		}
	})
	t.Run("distinct", func(t *testing.T) {
		seen := map[string]string{k1: secret}
		for i := range 1000 {
			s := secret + strconv.Itoa(i)
			k, err := key(s)
			require.NoError(t, err)
			if prev, ok := seen[k]; ok {
				t.Fatalf("KeyByAPIKey(%q) = KeyByAPIKey(%q) = %q", s, prev, k)
			}
			seen[k] = s
		}
	})
	t.Run("huge", func(t *testing.T) {
		big := strings.Repeat("k", 100_000)
		k, err := key(big)
		require.NoError(t, err)
		assert.Len(t, k, 25, "key of a 100 kB API key")
	})
	t.Run("known value", func(t *testing.T) {
		// sha256("abc") = ba7816bf8f01cfea414140de5dae2223...
		k, err := key("abc")
		require.NoError(t, err)
		assert.Equal(t, "ak:ungWv48Bz-pBQUDeXa4iIw", k)
	})
	for _, tc := range []struct {
		name   string
		values []string
	}{
		{"missing", nil},
		{"empty", []string{""}},
		{"spaces", []string{"  \t "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := key(tc.values...)
			assert.ErrorIs(t, err, ErrMissingKey, "KeyByAPIKey(%q) = %q, %v", tc.values, k, err)
			assert.Empty(t, k)
		})
	}
}

type ctxKey struct{}

type userID int

// Named ID types without a String method, as applications declare them.
type (
	namedID    string
	namedInt   int64
	namedUint  uint16
	namedBytes [16]byte
)

func (u userID) String() string {
	if u == 0 {
		return ""
	}
	return "u" + strconv.Itoa(int(u))
}

func TestKeyByContextValue(t *testing.T) {
	long := strings.Repeat("x", clientkey.MaxUserIDLen+1)
	tests := []struct {
		name    string
		value   any
		want    string
		wantErr error
	}{
		{"string", "alice", "user:alice", nil},
		{"stringer", userID(42), "user:u42", nil},
		{"128 bytes kept", strings.Repeat("x", clientkey.MaxUserIDLen), "user:" + strings.Repeat("x", clientkey.MaxUserIDLen), nil},
		{"long hashed", long, clientkey.Hash("user#:", long), nil},
		{"missing", nil, "", ErrMissingKey},
		{"empty string", "", "", ErrMissingKey},
		{"empty stringer", userID(0), "", ErrMissingKey},
		{"int", 42, "user:42", nil},
		{"int64", int64(42), "user:42", nil},
		{"uint64", uint64(42), "user:42", nil},
		{"int8", int8(-7), "user:-7", nil},
		{"uuid", [16]byte{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00}, "user:123e4567-e89b-12d3-a456-426614174000", nil},
		{"named string", namedID("alice"), "user:alice", nil},
		{"named int64", namedInt(-42), "user:-42", nil},
		{"named uint16", namedUint(42), "user:42", nil},
		{"named [16]byte", namedBytes{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00}, "user:123e4567-e89b-12d3-a456-426614174000", nil},
		{"empty named string", namedID(""), "", ErrMissingKey},
	}
	kf := KeyByContextValue(ctxKey{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if tc.value != nil {
				r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, tc.value))
			}
			got, err := kf(r)
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr, "KeyByContextValue(%v) = %q, %v", tc.value, got, err)
				return
			}
			require.NoError(t, err, "KeyByContextValue(%v)", tc.value)
			assert.Equal(t, tc.want, got, "KeyByContextValue(%v) = %q, want %q", tc.value, got, tc.want)
		})
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, long))
	got, err := kf(r)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(got, "user#:"), "long ID key %q", got)
	assert.Len(t, got, len("user#:")+22, "long ID key %q", got)
}

// A context key that finds nothing, or a value of a type that is no ID,
// is named in the error, which the log shows, with its type: a key of the
// wrong type (the string "user" for a struct type) is the usual mistake.
func TestKeyByContextValueNamesItsKey(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, "alice"))
	_, err := KeyByContextValue("user")(r)
	require.ErrorIs(t, err, ErrMissingKey)
	assert.EqualError(t, err, `ratelimit: missing key: no user ID in the request's context (KeyByContextValue("user"))`)

	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, 1.5))
	_, err = KeyByContextValue(ctxKey{})(r)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "KeyByContextValue(ratelimit.ctxKey{})", "the key and its type")
	assert.Contains(t, err.Error(), "is a float64", "the value's type")

}

// An ID is an ID whatever its type: the int 42, the string "42", the
// uint64 42 and a Stringer that says "42" are one user.
func TestKeyByContextValueOneIDOneKey(t *testing.T) {
	kf := KeyByContextValue(ctxKey{})
	keyOf := func(v any) string {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		k, err := kf(r.WithContext(context.WithValue(r.Context(), ctxKey{}, v)))
		require.NoError(t, err, "KeyByContextValue(%T %v)", v, v)
		return k
	}
	for _, v := range []any{42, "42", int64(42), uint64(42), userID(42), namedID("42"), namedInt(42), namedUint(42)} {
		want := "user:42"
		if _, ok := v.(userID); ok {
			want = "user:u42"
		}
		assert.Equal(t, want, keyOf(v), "KeyByContextValue(%T %v)", v, v)
	}
}

// The refusals of the key functions carry a detail for the client that
// names the header or the type, never the value, and the challenge of a
// 401.
func TestKeyRefusalDetails(t *testing.T) {
	const secret = "sk_live_0123456789abcdef"
	r := func(header ...string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Add(header[i], header[i+1])
		}
		return r
	}
	withValue := func(v any) *http.Request {
		req := r()
		return req.WithContext(context.WithValue(req.Context(), ctxKey{}, v))
	}
	for _, tc := range []struct {
		name      string
		key       KeyFunc
		r         *http.Request
		detail    string
		challenge string
	}{
		{"no API key", KeyByAPIKey(" X-API-Key "), r(), "the request carries no X-API-Key header", `ApiKey in="header", name="X-API-Key"`},
		{"empty API key", KeyByAPIKey("X-API-Key"), r("X-API-Key", "  "), "the request's X-API-Key header is empty", `ApiKey in="header", name="X-API-Key"`},
		{"Authorization", KeyByAPIKey("Authorization"), r(), "the request carries no Authorization header", "Bearer"},
		{"no user", KeyByContextValue(ctxKey{}), r(), "the request carries no user ID in its context", "Bearer"},
		{"empty user", KeyByContextValue(ctxKey{}), withValue(""), "the user ID in the request's context is empty", "Bearer"},
		{"empty joined key", JoinKeyFuncs(func(*http.Request) (string, error) { return "", nil }), r(), "a key function returned an empty key", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.key(tc.r)
			require.ErrorIs(t, err, ErrMissingKey)
			var ce *clientkey.Error
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tc.detail, ce.Detail)
			assert.Equal(t, tc.challenge, ce.Challenge)
			assert.NotContains(t, err.Error(), secret)
		})
	}
}

func TestJoinKeys(t *testing.T) {
	tests := []struct {
		parts []string
		want  string
	}{
		{nil, ""},
		{[]string{""}, "0:"},
		{[]string{"abc", "de"}, "3:abc2:de"},
		{[]string{"a:b", "c"}, "3:a:b1:c"},
		{[]string{"a", "b:c"}, "1:a3:b:c"},
		{[]string{strings.Repeat("z", 12), ""}, "12:" + strings.Repeat("z", 12) + "0:"},
	}
	for _, tc := range tests {
		got := joinKeys(tc.parts...)
		assert.Equal(t, tc.want, got, "joinKeys(%q) = %q, want %q", tc.parts, got, tc.want)
	}

	// Lists that a naive separator would confuse.
	ambiguous := [][2][]string{
		{{"a:b", "c"}, {"a", "b:c"}},
		{{"ab", ""}, {"a", "b"}},
		{{"", "ab"}, {"ab"}},
		{{"1:a"}, {"a"}},
		{{"1:a", ""}, {"1:a1:"}},
		{{"a", "b", "c"}, {"a", "1:b1:c"}},
		{{"", ""}, {""}},
		{{"2:ab"}, {"ab", ""}},
	}
	for _, p := range ambiguous {
		assert.NotEqual(t, joinKeys(p[0]...), joinKeys(p[1]...), "joinKeys(%q) = joinKeys(%q)", p[0], p[1])
	}
}

func TestJoinKeyFuncs(t *testing.T) {
	route := func(r *http.Request) (string, error) { return r.Method + " " + r.URL.Path, nil }
	ip, err := KeyByIP(nil)
	require.NoError(t, err)
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		fs      []KeyFunc
		want    string
		wantErr error
	}{
		{"route and IP", []KeyFunc{route, ip}, joinKeys("GET /geo", "ip:192.0.2.1"), nil},
		{"one", []KeyFunc{ip}, joinKeys("ip:192.0.2.1"), nil},
		{"first error", []KeyFunc{route, KeyByAPIKey("X-API-Key"), errFunc(errBoom)}, "", ErrMissingKey},
		{"error", []KeyFunc{route, errFunc(errBoom)}, "", errBoom},
		{"empty key", []KeyFunc{route, func(*http.Request) (string, error) { return "", nil }}, "", ErrMissingKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/geo", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			got, err := JoinKeyFuncs(tc.fs...)(r)
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr, "JoinKeyFuncs(%s) = %q, %v", tc.name, got, err)
				assert.Empty(t, got)
				return
			}
			require.NoError(t, err, "JoinKeyFuncs(%s)", tc.name)
			assert.Equal(t, tc.want, got, "JoinKeyFuncs(%s) = %q, want %q", tc.name, got, tc.want)
		})
	}
	t.Run("caller slice copied", func(t *testing.T) {
		fs := []KeyFunc{route}
		kf := JoinKeyFuncs(fs...)
		fs[0] = errFunc(errBoom)
		_, err := kf(httptest.NewRequest(http.MethodGet, "/", nil))
		assert.NoError(t, err, "JoinKeyFuncs uses the caller's slice")
	})
}

func errFunc(err error) KeyFunc {
	return func(*http.Request) (string, error) { return "", err }
}

// splitKeys undoes JoinKeys.
func splitKeys(s string) ([]string, bool) {
	var parts []string
	for s != "" {
		i := strings.IndexByte(s, ':')
		if i <= 0 {
			return nil, false
		}
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 || n > len(s)-i-1 || strconv.Itoa(n) != s[:i] {
			return nil, false
		}
		parts = append(parts, s[i+1:i+1+n])
		s = s[i+1+n:]
	}
	return parts, true
}

func FuzzJoinKeys(f *testing.F) {
	f.Add("a:b", "c", "a", "b:c")
	f.Add("", "", "", "")
	f.Add("1:a", "", "", "1:a")
	f.Add("ab", "", "a", "b")
	f.Add("0:", "x", "", "0:x")
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		ab, cd := joinKeys(a, b), joinKeys(c, d)
		if ab == cd && (a != c || b != d) {
			t.Fatalf("joinKeys(%q, %q) = joinKeys(%q, %q) = %q", a, b, c, d, ab)
		}
		if ab != cd && a == c && b == d {
			t.Fatalf("joinKeys(%q, %q) = %q and %q", a, b, ab, cd)
		}
		parts, ok := splitKeys(ab)
		if !ok || len(parts) != 2 || parts[0] != a || parts[1] != b {
			t.Fatalf("splitKeys(joinKeys(%q, %q)) = %q, %v", a, b, parts, ok)
		}
	})
}

// keyBytes keeps the benchmarks' results in use.
var keyBytes atomic.Int64

func BenchmarkKeyByAPIKey(b *testing.B) {
	kf := KeyByAPIKey("X-API-Key")
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-API-Key", "sk_live_51H8f3kLmN0pQrStUvWxYz0123456789")
	benchKeys(b, kf, r)
}

// benchKeys calls kf on r from parallel goroutines, keeping the keys'
// lengths so that no call is optimized away.
func benchKeys(b *testing.B, kf KeyFunc, r *http.Request) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		for pb.Next() {
			k, err := kf(r)
			if err != nil {
				panic(err)
			}
			n += len(k)
		}
		keyBytes.Add(int64(n))
	})
}

func BenchmarkJoinKeys(b *testing.B) {
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n += len(joinKeys("GET /v1/geocode", "ip:203.0.113.7"))
	}
	if n == 0 {
		b.Fatal("no keys")
	}
}

// KeyByAPIKey caches the hashes of the API keys it sees: whatever the
// cache holds, every key is the SHA-256 one, also when more API keys than
// the cache's slots evict each other, and a repeated API key allocates
// nothing.
func TestKeyByAPIKeyCache(t *testing.T) {
	key := KeyByAPIKey("X-API-Key")
	r := httptest.NewRequest("GET", "/", nil)
	for round := range 3 {
		for i := range 3000 {
			secret := "secret-" + strconv.Itoa(i*7919%3000)
			r.Header.Set("X-API-Key", secret)
			got, err := key(r)
			require.NoError(t, err)
			if want := clientkey.Hash("ak:", secret); got != want {
				t.Fatalf("round %d: key of %q = %q, want %q", round, secret, got, want)
			}
		}
	}
	r.Header.Set("X-API-Key", "a-busy-client")
	_, _ = key(r)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = key(r) }), "a cached API key allocates")
}

// TestKeyFuncMistakesPanic: a key function that would refuse every request
// (a header no request can carry, no function, a nil one, a nil context
// key) panics when it is built, with an error that names the value.
func TestKeyFuncMistakesPanic(t *testing.T) {
	route := func(r *http.Request) (string, error) { return r.URL.Path, nil }
	for _, tc := range []struct {
		build func() KeyFunc
		want  string
	}{
		{func() KeyFunc { return KeyByAPIKey("") }, `ratelimit: KeyByAPIKey(""): not a header field name, such as X-API-Key`},
		{func() KeyFunc { return KeyByAPIKey("  ") }, `ratelimit: KeyByAPIKey("  "): not a header field name, such as X-API-Key`},
		{func() KeyFunc { return KeyByAPIKey("X API Key") }, `ratelimit: KeyByAPIKey("X API Key"): not a header field name, such as X-API-Key`},
		{func() KeyFunc { return KeyByAPIKey("X-API-Key:") }, `ratelimit: KeyByAPIKey("X-API-Key:"): not a header field name, such as X-API-Key`},
		{func() KeyFunc { return JoinKeyFuncs() }, "ratelimit: JoinKeyFuncs: no key function"},
		{func() KeyFunc { return JoinKeyFuncs(route, nil) }, "ratelimit: JoinKeyFuncs: key function 1 is nil"},
		{func() KeyFunc { return KeyByContextValue(nil) }, "ratelimit: KeyByContextValue: nil context key"},
	} {
		assert.PanicsWithError(t, tc.want, func() { tc.build() })
	}
	assert.NotPanics(t, func() { KeyByAPIKey(" X-Api-Key ") }, "spaces around a name are trimmed")
}

// A user ID of a type that cannot be a key is the server's mistake, not
// the client's: an error that wraps neither ErrMissingKey nor
// ErrBadRequest (so 500), of its own kind, naming the type, never the
// value.
func TestKeyByContextValueUnusableType(t *testing.T) {
	const secret = "sk_live_0123456789abcdef"
	kf := KeyByContextValue(ctxKey{})
	for _, v := range []any{map[string]int{secret: 1}, 42.0, true, []byte(secret), &struct{ ID string }{secret}, [8]byte{}} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		k, err := kf(r.WithContext(context.WithValue(r.Context(), ctxKey{}, v)))
		require.Error(t, err, "KeyByContextValue(%T) = %q", v, k)
		assert.Empty(t, k)
		assert.NotErrorIs(t, err, ErrMissingKey, "%T", v)
		assert.NotErrorIs(t, err, ErrBadRequest, "%T", v)
		var ce *clientkey.Error
		require.ErrorAs(t, err, &ce, "%T", v)
		assert.Equal(t, clientkey.KindUserIDType, ce.Kind, "%T", v)
		assert.Contains(t, err.Error(), fmt.Sprintf("the user ID in the request's context is a %T, not a string, integer, fmt.Stringer or [16]byte", v))
		assert.NotContains(t, err.Error(), secret)
	}
}

// The auth-scheme of Authorization is case-insensitive and is separated
// from the credentials by whitespace of any length (RFC 9110 §11.4), so
// one credential has one key however it is spelled; the credentials keep
// their case, and quoted strings their content.
func TestKeyByAPIKeyAuthorization(t *testing.T) {
	kf := KeyByAPIKey("Authorization")
	key := func(values ...string) string {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		for _, v := range values {
			r.Header.Add("Authorization", v)
		}
		k, err := kf(r)
		require.NoError(t, err, "Authorization %q", values)
		return k
	}
	for _, group := range [][]string{
		{"Bearer t0k3n", "bearer t0k3n", "BEARER t0k3n", "Bearer  t0k3n", "Bearer\tt0k3n", "  bEaReR \t t0k3n  "},
		{"Basic YWxhZGRpbjpvcGVuc2VzYW1l", "basic YWxhZGRpbjpvcGVuc2VzYW1l", "BASIC   YWxhZGRpbjpvcGVuc2VzYW1l"},
		{`Digest username="a b", realm="r"`, `digest username = "a b" ,realm="r"`, `DIGEST   username="a b",  realm= "r"`},
		{"Bearer abc==", "bearer abc=="},
	} {
		want := clientkey.Hash("ak:", strings.ToLower(group[0][:strings.IndexByte(group[0], ' ')])+group[0][strings.IndexByte(group[0], ' '):])
		if group[0][0] == 'D' {
			want = clientkey.Hash("ak:", `digest username="a b",realm="r"`)
		}
		for _, v := range group {
			assert.Equal(t, want, key(v), "Authorization %q", v)
		}
	}
	// Different credentials stay apart.
	seen := map[string]string{}
	for _, v := range []string{
		"Bearer t0k3n", "Bearer T0K3N", "Basic t0k3n", "Bearer t0k3n2", "bearer", "Bearer",
		"sk_live_ABC", "sk_live_abc", `Digest realm="a  b"`, `Digest realm="a b"`, `Digest realm="A b"`,
		`Digest realm="a\"b", x=1`, `Digest realm="a\", x=1"`,
	} {
		k := key(v)
		if prev, ok := seen[k]; ok {
			t.Errorf("Authorization %q and %q have one key %q", v, prev, k)
		}
		seen[k] = v
	}
	// Two Authorization lines are refused, as two X-API-Key lines are.
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Add("Authorization", "Bearer a")
	r.Header.Add("Authorization", "Bearer b")
	_, err := kf(r)
	assert.ErrorIs(t, err, ErrBadRequest)
	var ce *clientkey.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "the request carries 2 Authorization lines, not one", ce.Detail)
}

// The spellings of a cached Authorization credential allocate nothing.
func TestKeyByAPIKeyAuthorizationAllocs(t *testing.T) {
	kf := KeyByAPIKey("Authorization")
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Authorization", "BEARER  t0k3n")
	_, _ = kf(r)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = kf(r) }), "a cached Authorization allocates")
}
