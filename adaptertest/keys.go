package adaptertest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

// Keys is an adapter's own key functions, those that read the framework's
// context, as RunKeys builds and runs them. Every field must be set.
type Keys struct {
	// IPName is what the errors of the key function by client address
	// begin with, such as "ginlimit: KeyByClientIP".
	IPName string

	// ByIP builds the key function by client address with opts and returns
	// it run on r by an engine that trusts the proxies listed (none if
	// empty) to forward the client's address in X-Forwarded-For.
	ByIP func(opts *ratelimit.IPOptions) (func(r *http.Request, proxies []string) (string, error), error)

	// ByValue runs KeyByValue(name) on a request whose framework context
	// holds v under name, or nothing if v is nil.
	ByValue func(name string, v any) (string, error)

	// Engine returns the handler of an engine that trusts the proxies
	// listed, where GET /user stores the X-User field's value, if any,
	// under "user", then is limited by user keyed by KeyByValue("user"),
	// and GET /anon is limited by anon keyed by the key function by client
	// address with nil options; both answer 200 "ok".
	Engine func(t *testing.T, proxies []string, user, anon *ratelimit.Limiter) http.Handler
}

// RunKeys runs the suite's tests of an adapter's own key functions: they
// key a request exactly as the core's KeyByIP and KeyByContextValue key
// the same client, check their options, and work in a real engine.
func RunKeys(t *testing.T, k Keys) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Keys)
	}{
		{"ByIP", testByIP},
		{"ByIPMatchesCore", testByIPMatchesCore},
		{"ByIPOptions", testByIPOptions},
		{"ByValue", testByValue},
		{"Engine", testKeysInEngine},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, k) })
	}
}

// keyOf returns the key that byIP, built with opts, gives a request from
// remoteAddr, with X-Forwarded-For xff (none if empty), in an engine that
// trusts proxies.
func keyOf(t *testing.T, k Keys, opts *ratelimit.IPOptions, proxies []string, remoteAddr, xff string) (string, error) {
	t.Helper()
	byIP, err := k.ByIP(opts)
	require.NoError(t, err, "%s(%+v)", k.IPName, opts)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remoteAddr
	if xff != "" {
		r.Header.Set("X-Forwarded-For", xff)
	}
	return byIP(r, proxies)
}

func testByIP(t *testing.T, k Keys) {
	by64, by128 := &ratelimit.IPOptions{IPv6Prefix: 64}, &ratelimit.IPOptions{IPv6Prefix: 128}
	proxies := []string{"10.0.0.0/8"}
	for _, tc := range []struct {
		opts            *ratelimit.IPOptions
		proxies         []string
		remoteAddr, xff string
		want            string
	}{
		{nil, nil, "192.0.2.1:1234", "", "ip:192.0.2.1"},
		{nil, nil, "192.0.2.1:1234", "203.0.113.7", "ip:192.0.2.1"}, // no trusted proxy: the header ignored
		{nil, proxies, "10.1.2.3:1234", "203.0.113.7", "ip:203.0.113.7"},
		{nil, proxies, "10.1.2.3:1234", "198.51.100.1, 203.0.113.7", "ip:203.0.113.7"},
		{nil, proxies, "192.0.2.50:1234", "203.0.113.7", "ip:192.0.2.50"}, // untrusted peer
		{nil, nil, "[::ffff:192.0.2.1]:80", "", "ip:192.0.2.1"},
		{nil, nil, "[2001:db8:1:2::7]:443", "", "ip:2001:db8:1:2::/64"}, // IPv6 by /64 by default
		{by128, nil, "[2001:db8:1:2::7]:443", "", "ip:2001:db8:1:2::7"},
		{by64, nil, "[2001:db8:1:2::7]:443", "", "ip:2001:db8:1:2::/64"},
		{by64, nil, "192.0.2.1:1234", "", "ip:192.0.2.1"},
	} {
		got, err := keyOf(t, k, tc.opts, tc.proxies, tc.remoteAddr, tc.xff)
		if assert.NoError(t, err, "RemoteAddr %q, X-Forwarded-For %q", tc.remoteAddr, tc.xff) {
			assert.Equal(t, tc.want, got, "RemoteAddr %q, X-Forwarded-For %q", tc.remoteAddr, tc.xff)
		}
	}
	_, err := keyOf(t, k, nil, nil, "not-an-address", "")
	assert.ErrorIs(t, err, ratelimit.ErrBadRequest)
}

// testByIPMatchesCore: without proxies the client is the peer, and its key
// is the core's key for the same peer.
func testByIPMatchesCore(t *testing.T, k Keys) {
	core, err := ratelimit.KeyByIP(nil)
	require.NoError(t, err)
	for _, addr := range []string{"192.0.2.1:1", "[::ffff:10.0.0.1]:2", "[2001:DB8::1]:4", "[::1]:5", "[2001:db8::ffff:0:1]:6"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = addr
		want, err := core(r)
		require.NoError(t, err, addr)
		got, err := keyOf(t, k, nil, nil, addr, "")
		require.NoError(t, err, addr)
		assert.Equal(t, want, got, addr)
	}
}

// testByIPOptions: an invalid IPv6Prefix is an error naming it, and so are
// TrustedProxies and Header, which the framework's choice of the address
// would ignore.
func testByIPOptions(t *testing.T, k Keys) {
	_, err := k.ByIP(&ratelimit.IPOptions{IPv6Prefix: 129})
	assert.EqualError(t, err, k.IPName+": IPv6Prefix 129: want 1 to 128, or 0 for the default, 64")
	_, err = k.ByIP(&ratelimit.IPOptions{TrustedProxies: []string{"10.0.0.0/8"}})
	assert.Error(t, err, "TrustedProxies would be ignored")
	_, err = k.ByIP(&ratelimit.IPOptions{Header: "Forwarded"})
	assert.Error(t, err, "Header would be ignored")
}

type (
	userID  int    // a fmt.Stringer
	namedID string // a named string
	ctxKey  struct{}
)

func (u userID) String() string { return fmt.Sprintf("u%d", int(u)) }

// testByValue: a value of a key's type is keyed as the core keys it; no
// value or an empty one is ErrMissingKey (401); a value of a type that
// cannot be a key is the server's mistake (500), not the client's.
func testByValue(t *testing.T, k Keys) {
	core := ratelimit.KeyByContextValue(ctxKey{})
	long := string(make([]byte, 200))
	for _, v := range []any{"alice", userID(42), long, 42, uint64(42), [16]byte{15: 1}, namedID("alice")} {
		got, err := k.ByValue("user", v)
		require.NoError(t, err, "value %#v", v)
		want, err := core(httptest.NewRequest(http.MethodGet, "/", nil).WithContext(context.WithValue(context.Background(), ctxKey{}, v)))
		require.NoError(t, err)
		assert.Equal(t, want, got, "value %#v", v)
	}
	for _, v := range []any{nil, ""} {
		_, err := k.ByValue("user", v)
		assert.ErrorIs(t, err, ratelimit.ErrMissingKey, "value %#v", v)
	}
	for _, v := range []any{4.2, map[string]int{}} {
		_, err := k.ByValue("user", v)
		require.Error(t, err, "value %#v", v)
		assert.NotErrorIs(t, err, ratelimit.ErrMissingKey, "value %#v", v)
		assert.NotErrorIs(t, err, ratelimit.ErrBadRequest, "value %#v", v)
	}
}

// testKeysInEngine runs both key functions in a real engine: users
// authenticated by an earlier handler, and anonymous clients behind a
// trusted proxy.
func testKeysInEngine(t *testing.T, k Keys) {
	e := k.Engine(t, []string{"10.0.0.0/8"}, newLimiter(t, nil, ratelimit.Per(2, time.Minute), ""), newLimiter(t, nil, ratelimit.Per(1, time.Minute), ""))
	require.NotNil(t, e, "Engine returned nil")
	get := func(path, user, remoteAddr, xff string) int {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		if user != "" {
			r.Header.Set("X-User", user)
		}
		if remoteAddr != "" {
			r.RemoteAddr = remoteAddr
		}
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		return w.Code
	}
	assert.Equal(t, []int{200, 200, 429, 200, 401}, []int{
		get("/user", "alice", "", ""), get("/user", "alice", "", ""), get("/user", "alice", "", ""),
		get("/user", "bob", "", ""), get("/user", "", "", ""),
	})
	const proxy = "10.1.2.3:4000"
	assert.Equal(t, []int{200, 429, 200, 429}, []int{
		get("/anon", "", proxy, "203.0.113.7"), get("/anon", "", proxy, "198.51.100.1, 203.0.113.7"),
		get("/anon", "", proxy, "203.0.113.8"), get("/anon", "", "203.0.113.8:1", "192.0.2.99"),
	})
}
