package ginlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/adaptertest"
	"github.com/tokenfair/ratelimit/ginlimit"
)

// TestKeys runs adaptertest's tests of KeyByClientIP and KeyByValue. (Gin
// finds no client in a zoned peer such as [fe80::1%eth0]:3, which
// net.ParseIP refuses; KeyByClientIP then answers ErrNoClientIP.)
func TestKeys(t *testing.T) {
	adaptertest.RunKeys(t, adaptertest.Keys{
		IPName: "ginlimit: KeyByClientIP",
		ByIP: func(opts *ratelimit.IPOptions) (func(*http.Request, []string) (string, error), error) {
			byIP, err := ginlimit.KeyByClientIP(opts)
			if err != nil {
				return nil, err
			}
			return func(r *http.Request, proxies []string) (string, error) {
				c, e := gin.CreateTestContext(httptest.NewRecorder())
				if err := e.SetTrustedProxies(proxies); err != nil {
					return "", err
				}
				c.Request = r
				return byIP(c)
			}, nil
		},
		ByValue: func(name string, v any) (string, error) {
			c, _ := gin.CreateTestContext(httptest.NewRecorder())
			if v != nil {
				c.Set(name, v)
			}
			return ginlimit.KeyByValue(name)(c)
		},
		Engine: func(t *testing.T, proxies []string, user, anon *ratelimit.Limiter) http.Handler {
			byUser, err := ginlimit.New(user, ginlimit.KeyByValue("user"), nil)
			require.NoError(t, err)
			byIP, err := ginlimit.KeyByClientIP(nil)
			require.NoError(t, err)
			byIPLimit, err := ginlimit.New(anon, byIP, nil)
			require.NoError(t, err)
			e := gin.New()
			require.NoError(t, e.SetTrustedProxies(proxies))
			auth := func(c *gin.Context) {
				if u := c.GetHeader("X-User"); u != "" {
					c.Set("user", u)
				}
			}
			ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
			e.GET("/user", auth, byUser, ok)
			e.GET("/anon", byIPLimit, ok)
			return e
		},
	})
}

// Gin trusts every proxy until SetTrustedProxies says otherwise, so on
// gin.New() any client could pick its key with X-Forwarded-For: 200
// requests with 200 forged addresses, and a victim banned by a client that
// writes its address. KeyByClientIP keys the TCP peer there instead, and
// Gin's answer once the engine trusts only some proxies.
func TestKeyByClientIPDefaultEngine(t *testing.T) {
	byIP, err := ginlimit.KeyByClientIP(nil)
	require.NoError(t, err)
	serve := func(e *gin.Engine, remoteAddr string, header ...string) int {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remoteAddr
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		return w.Code
	}
	newEngine := func(configure func(*gin.Engine)) *gin.Engine {
		h, err := ginlimit.New(newLimiter(t, ratelimit.Per(5, time.Minute)), byIP, nil)
		require.NoError(t, err)
		e := gin.New()
		configure(e)
		e.GET("/", h, func(c *gin.Context) { c.String(http.StatusOK, "ok") })
		return e
	}

	e := newEngine(func(*gin.Engine) {})
	admitted := 0
	for i := range 200 {
		if serve(e, "198.51.100.66:4000", "X-Forwarded-For", fmt.Sprintf("203.0.%d.%d", i/256, i%256+1)) == http.StatusOK {
			admitted++
		}
	}
	assert.Equal(t, 5, admitted, "gin.New(): 200 requests with 200 forged X-Forwarded-For addresses")
	for range 10 {
		serve(e, "198.51.100.66:4000", "X-Forwarded-For", "192.0.2.7", "X-Real-IP", "192.0.2.7")
	}
	assert.Equal(t, http.StatusOK, serve(e, "192.0.2.7:5000"), "gin.New(): the victim whose address was forged")

	// Custom RemoteIPHeaders on an engine that trusts every proxy.
	e = newEngine(func(e *gin.Engine) { e.RemoteIPHeaders = []string{"X-Client-IP"} })
	assert.Equal(t, []int{200, 200, 200, 200, 200, 429}, []int{
		serve(e, "198.51.100.66:1", "X-Client-IP", "203.0.113.1"), serve(e, "198.51.100.66:1", "X-Client-IP", "203.0.113.2"),
		serve(e, "198.51.100.66:1", "X-Client-IP", "203.0.113.3"), serve(e, "198.51.100.66:1", "X-Client-IP", "203.0.113.4"),
		serve(e, "198.51.100.66:1", "X-Client-IP", "203.0.113.5"), serve(e, "198.51.100.66:1", "X-Client-IP", "203.0.113.6"),
	}, "gin.New() with RemoteIPHeaders X-Client-IP")

	// An IPv6 peer of an engine that trusts every proxy.
	e = newEngine(func(*gin.Engine) {})
	codes := make([]int, 6)
	for i := range codes {
		codes[i] = serve(e, "[2001:db8::66]:1", "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i+1))
	}
	assert.Equal(t, []int{200, 200, 200, 200, 200, 429}, codes, "gin.New(), an IPv6 peer")

	// An IPv4-mapped peer of an engine that trusts every IPv4 proxy.
	e = newEngine(func(e *gin.Engine) { require.NoError(t, e.SetTrustedProxies([]string{"0.0.0.0/0"})) })
	for i := range codes {
		codes[i] = serve(e, "[::ffff:198.51.100.66]:1", "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i+1))
	}
	assert.Equal(t, []int{200, 200, 200, 200, 200, 429}, codes, "SetTrustedProxies 0.0.0.0/0, an IPv4-mapped peer")

	// With SetTrustedProxies, Gin's answer is believed from the proxies it
	// trusts, and only from them.
	e = newEngine(func(e *gin.Engine) { require.NoError(t, e.SetTrustedProxies([]string{"10.0.0.0/8"})) })
	for i := range 5 {
		assert.Equal(t, http.StatusOK, serve(e, "10.1.2.3:4000", "X-Forwarded-For", "203.0.113.7"), "request %d", i)
	}
	assert.Equal(t, http.StatusTooManyRequests, serve(e, "10.1.2.3:4000", "X-Forwarded-For", "203.0.113.7"))
	assert.Equal(t, http.StatusOK, serve(e, "10.1.2.3:4000", "X-Forwarded-For", "203.0.113.8"), "another client behind the proxy")
	for i := range 5 {
		assert.Equal(t, http.StatusOK, serve(e, "198.51.100.66:1", "X-Forwarded-For", fmt.Sprintf("192.0.2.%d", i+1)), "request %d", i)
	}
	assert.Equal(t, http.StatusTooManyRequests, serve(e, "198.51.100.66:1", "X-Forwarded-For", "192.0.2.9"), "an untrusted peer")

	// A trusted platform's header is the engine's explicit choice: believed,
	// also on an engine that otherwise trusts every proxy; X-Forwarded-For
	// is not, there.
	for _, trusted := range []bool{false, true} {
		e = newEngine(func(e *gin.Engine) {
			e.TrustedPlatform = gin.PlatformCloudflare
			if trusted {
				require.NoError(t, e.SetTrustedProxies(nil))
			}
		})
		for i := range 5 {
			assert.Equal(t, http.StatusOK, serve(e, "198.51.100.66:1", "CF-Connecting-IP", "203.0.113.7", "X-Forwarded-For", "203.0.113.7"), "SetTrustedProxies %v: request %d", trusted, i)
		}
		assert.Equal(t, http.StatusTooManyRequests, serve(e, "198.51.100.66:1", "CF-Connecting-IP", "203.0.113.7"), "SetTrustedProxies %v", trusted)
		assert.Equal(t, http.StatusOK, serve(e, "198.51.100.66:1", "CF-Connecting-IP", "203.0.113.8"), "SetTrustedProxies %v: another client", trusted)
		for i := range 5 {
			assert.Equal(t, http.StatusOK, serve(e, "198.51.100.67:1", "X-Forwarded-For", fmt.Sprintf("192.0.2.%d", i+1)), "SetTrustedProxies %v: request %d", trusted, i)
		}
		assert.Equal(t, http.StatusTooManyRequests, serve(e, "198.51.100.67:1", "X-Forwarded-For", "192.0.2.9"), "SetTrustedProxies %v: no platform header", trusted)
	}
}

// One trusted proxy, exactly, as docs/frameworks.md sets it: Gin believes
// X-Forwarded-For from 10.0.0.5 alone; a forged one from any other peer,
// private ones included, is ignored.
func TestKeyByClientIPOneTrustedProxy(t *testing.T) {
	byIP, err := ginlimit.KeyByClientIP(nil)
	require.NoError(t, err)
	for _, tc := range []struct{ peer, xff, want string }{
		{"10.0.0.5:1234", "203.0.113.7", "ip:203.0.113.7"},
		{"10.0.0.5:1234", "6.6.6.6, 203.0.113.7", "ip:203.0.113.7"},
		{"10.0.0.6:1234", "203.0.113.7", "ip:10.0.0.6"},
		{"127.0.0.1:1234", "203.0.113.7", "ip:127.0.0.1"},
	} {
		c, e := gin.CreateTestContext(httptest.NewRecorder())
		require.NoError(t, e.SetTrustedProxies([]string{"10.0.0.5"}))
		e.RemoteIPHeaders = []string{"X-Forwarded-For"}
		c.Request = httptest.NewRequest(http.MethodGet, "/", nil)
		c.Request.RemoteAddr = tc.peer
		c.Request.Header.Set("X-Forwarded-For", tc.xff)
		got, err := byIP(c)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "peer %s, X-Forwarded-For %q", tc.peer, tc.xff)
	}
}
