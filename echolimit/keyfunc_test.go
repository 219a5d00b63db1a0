package echolimit_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/adaptertest"
	"github.com/tokenfair/ratelimit/echolimit"
)

// TestKeys runs adaptertest's tests of KeyByRealIP and KeyByValue.
func TestKeys(t *testing.T) {
	adaptertest.RunKeys(t, adaptertest.Keys{
		IPName: "echolimit: KeyByRealIP",
		ByIP: func(opts *ratelimit.IPOptions) (func(*http.Request, []string) (string, error), error) {
			byIP, err := echolimit.KeyByRealIP(opts)
			if err != nil {
				return nil, err
			}
			return func(r *http.Request, proxies []string) (string, error) {
				e, err := newEchoTrusting(proxies)
				if err != nil {
					return "", err
				}
				return byIP(e.NewContext(r, httptest.NewRecorder()))
			}, nil
		},
		ByValue: func(name string, v any) (string, error) {
			c := echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder())
			if v != nil {
				c.Set(name, v)
			}
			return echolimit.KeyByValue(name)(c)
		},
		Engine: func(t *testing.T, proxies []string, user, anon *ratelimit.Limiter) http.Handler {
			byUser, err := echolimit.New(user, echolimit.KeyByValue("user"), nil, nil)
			require.NoError(t, err)
			byIP, err := echolimit.KeyByRealIP(nil)
			require.NoError(t, err)
			byIPLimit, err := echolimit.New(anon, byIP, nil, nil)
			require.NoError(t, err)
			e, err := newEchoTrusting(proxies)
			require.NoError(t, err)
			auth := func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(c echo.Context) error {
					if u := c.Request().Header.Get("X-User"); u != "" {
						c.Set("user", u)
					}
					return next(c)
				}
			}
			ok := func(c echo.Context) error { return c.String(http.StatusOK, "ok") }
			e.GET("/user", ok, auth, byUser)
			e.GET("/anon", ok, byIPLimit)
			return e
		},
	})
}

// newEchoTrusting returns an Echo instance whose IPExtractor reads
// X-Forwarded-For from the proxies in the CIDRs listed, or none if the list
// is empty.
func newEchoTrusting(proxies []string) (*echo.Echo, error) {
	e := echo.New()
	if len(proxies) == 0 {
		return e, nil
	}
	var trust []echo.TrustOption
	for _, cidr := range proxies {
		_, n, err := net.ParseCIDR(cidr)
		if err != nil {
			return nil, err
		}
		trust = append(trust, echo.TrustIPRange(n))
	}
	e.IPExtractor = echo.ExtractIPFromXFFHeader(trust...)
	return e, nil
}

// TestKeyByRealIPExtractors: what adaptertest.RunKeys cannot ask of Gin,
// Echo answers: ExtractIPDirect keys the peer, and a zoned peer has a key
// without its zone.
func TestKeyByRealIPExtractors(t *testing.T) {
	byIP, err := echolimit.KeyByRealIP(nil)
	require.NoError(t, err)
	by64, err := echolimit.KeyByRealIP(&ratelimit.IPOptions{IPv6Prefix: 64})
	require.NoError(t, err)
	by128, err := echolimit.KeyByRealIP(&ratelimit.IPOptions{IPv6Prefix: 128})
	require.NoError(t, err)
	for _, tc := range []struct {
		f               echolimit.KeyFunc
		extractor       echo.IPExtractor
		remoteAddr, xff string
		want            string
	}{
		{byIP, echo.ExtractIPDirect(), "192.0.2.1:1234", "203.0.113.7", "ip:192.0.2.1"},
		{byIP, echo.ExtractIPDirect(), "[::ffff:192.0.2.1]:80", "", "ip:192.0.2.1"},
		{byIP, nil, "[fe80::1%eth0]:80", "", "ip:fe80::/64"}, // IPv6 by /64 by default
		{by128, nil, "[fe80::1%eth0]:80", "", "ip:fe80::1"},
		{by128, echo.ExtractIPDirect(), "[2001:db8:1:2::7]:443", "", "ip:2001:db8:1:2::7"},
		{by64, echo.ExtractIPDirect(), "[2001:db8:1:2::7]:443", "", "ip:2001:db8:1:2::/64"},
	} {
		e := echo.New()
		e.IPExtractor = tc.extractor
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.remoteAddr
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		got, err := tc.f(e.NewContext(r, httptest.NewRecorder()))
		if assert.NoError(t, err, "RemoteAddr %q, X-Forwarded-For %q", tc.remoteAddr, tc.xff) {
			assert.Equal(t, tc.want, got, "RemoteAddr %q, X-Forwarded-For %q", tc.remoteAddr, tc.xff)
		}
	}
}

// One trusted proxy, exactly: ExtractIPFromXFFHeader trusts loopback,
// link-local and private addresses unless told not to, so docs/frameworks.md
// turns those off and trusts the proxy's address alone. A forged
// X-Forwarded-For from any other peer, private ones included, is ignored.
func TestKeyByRealIPOneTrustedProxy(t *testing.T) {
	_, proxy, err := net.ParseCIDR("10.0.0.5/32")
	require.NoError(t, err)
	e := echo.New()
	e.IPExtractor = echo.ExtractIPFromXFFHeader(
		echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false),
		echo.TrustIPRange(proxy))
	byIP, err := echolimit.KeyByRealIP(nil)
	require.NoError(t, err)
	for _, tc := range []struct{ peer, xff, want string }{
		{"10.0.0.5:1234", "203.0.113.7", "ip:203.0.113.7"},          // through the proxy
		{"10.0.0.5:1234", "6.6.6.6, 203.0.113.7", "ip:203.0.113.7"}, // the client's own entry is not believed
		{"10.0.0.6:1234", "203.0.113.7", "ip:10.0.0.6"},             // a private peer that is not the proxy
		{"127.0.0.1:1234", "203.0.113.7", "ip:127.0.0.1"},           // nor is loopback
		{"198.51.100.9:1234", "203.0.113.7", "ip:198.51.100.9"},     // nor anyone else
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.peer
		r.Header.Set("X-Forwarded-For", tc.xff)
		got, err := byIP(e.NewContext(r, httptest.NewRecorder()))
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "peer %s, X-Forwarded-For %q", tc.peer, tc.xff)
	}
}
