package ratelimit_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
)

// captureLogs sends slog.Default to a buffer for the test.
func captureLogs(t *testing.T) *bytes.Buffer {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return &buf
}

func warnings(buf *bytes.Buffer, kind string) int {
	return strings.Count(buf.String(), "warning="+kind)
}

type countingWarner struct {
	nopObserver
	kinds map[string]int
}

type nopObserver struct{}

func (nopObserver) Observe(*http.Request, ratelimit.Event) {}

func (c *countingWarner) Warn(kind string) { c.kinds[kind]++ }

func serveKeys(t *testing.T, key ratelimit.KeyFunc, n int, opts ...ratelimit.Option) {
	t.Helper()
	store, err := memorystore.New(memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(1_000_000).WithBurst(1_000_000)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, key, opts...)
	require.NoError(t, err)
	h := nethttp.Middleware(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for i := range n {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = fmt.Sprintf("192.0.2.%d:1234", i%200)
		r.Header.Set("X-Forwarded-For", "198.51.100.7")
		r.Header.Set("X-Client", fmt.Sprint("client-", i%500))
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
}

func TestWarnForwardedWithoutTrustedProxy(t *testing.T) {
	logs := captureLogs(t)
	byIP, err := ratelimit.KeyByIP()
	require.NoError(t, err)
	serveKeys(t, byIP, 100)
	assert.Equal(t, 1, warnings(logs, "forwarded-without-trusted-proxy"), logs.String())

	logs.Reset()
	trusted, err := ratelimit.KeyByIP(ratelimit.TrustedProxies("192.0.2.0/24"))
	require.NoError(t, err)
	serveKeys(t, trusted, 100)
	quiet, err := ratelimit.KeyByIP(ratelimit.QuietIP())
	require.NoError(t, err)
	serveKeys(t, quiet, 100)
	assert.Empty(t, logs.String())
}

func TestWarnWideTrustedRange(t *testing.T) {
	logs := captureLogs(t)
	for _, cidr := range []string{"0.0.0.0/0", "::/0", "128.0.0.0/1", "2000::/3"} {
		_, err := ratelimit.KeyByIP(ratelimit.TrustedProxies(cidr))
		require.NoError(t, err)
	}
	assert.Equal(t, 4, warnings(logs, "wide-trusted-range"), logs.String())
	logs.Reset()
	for _, cidr := range []string{"10.0.0.0/8", "2001:db8::/32", "192.0.2.1"} {
		_, err := ratelimit.KeyByIP(ratelimit.TrustedProxies(cidr))
		require.NoError(t, err)
	}
	_, err := ratelimit.KeyByIP(ratelimit.TrustedProxies("0.0.0.0/0"), ratelimit.QuietIP())
	require.NoError(t, err)
	assert.Empty(t, logs.String())
}

func TestWarnOneKey(t *testing.T) {
	logs := captureLogs(t)
	w := &countingWarner{kinds: map[string]int{}}
	one := func(*http.Request) (string, error) { return "everyone", nil }
	serveKeys(t, one, 3*64*256, ratelimit.WithObserver(w))
	assert.Equal(t, 1, warnings(logs, "one-key"), "once, however long it lasts")
	assert.Equal(t, map[string]int{"one-key": 1}, w.kinds)

	logs.Reset()
	serveKeys(t, keyByHeader, 2*64*256)
	serveKeys(t, one, 2*64*256, ratelimit.WithoutWarnings())
	assert.Empty(t, logs.String(), "500 clients, or warnings off")
}

func TestWarnSharedPolicyName(t *testing.T) {
	logs := captureLogs(t)
	store, err := memorystore.New(memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	newMW := func(l ratelimit.Limit, opts ...ratelimit.Option) {
		lim, err := ratelimit.New(store, ratelimit.Policy{Name: "api", Limit: l})
		require.NoError(t, err)
		_, err = ratelimit.NewMiddleware(lim, keyByHeader, opts...)
		require.NoError(t, err)
	}
	newMW(ratelimit.PerSecond(5))
	newMW(ratelimit.PerSecond(5))
	assert.Empty(t, logs.String(), "the same limit under one name is fine")
	newMW(ratelimit.PerSecond(50), ratelimit.WithoutWarnings())
	assert.Empty(t, logs.String())
	newMW(ratelimit.PerSecond(50))
	assert.Equal(t, 1, warnings(logs, "shared-policy-name"), logs.String())
}

// The limiters that WithLimiterFor picks are checked too, the first time
// each is picked, and once.
func TestWarnSharedPolicyNamePickedLimiter(t *testing.T) {
	logs := captureLogs(t)
	store, err := memorystore.New(memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	free, err := ratelimit.New(store, ratelimit.Policy{Name: "tier", Limit: ratelimit.PerSecond(5)})
	require.NoError(t, err)
	paid, err := ratelimit.New(store, ratelimit.Policy{Name: "tier", Limit: ratelimit.PerSecond(50)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(free, keyByHeader, ratelimit.WithLimiterFor(func(r *http.Request) *ratelimit.Limiter {
		if r.Header.Get("X-Paid") != "" {
			return paid
		}
		return nil
	}))
	require.NoError(t, err)
	h := nethttp.Middleware(m)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	assert.Empty(t, logs.String())
	for range 3 {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Client", "c")
		r.Header.Set("X-Paid", "yes")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	assert.Equal(t, 1, warnings(logs, "shared-policy-name"), logs.String())
}

// A store that is collected can leave its address to a new one: the new
// store's policies must not be compared with the old one's.
func TestWarnSharedPolicyNameNotAcrossCollectedStores(t *testing.T) {
	logs := captureLogs(t)
	for i := range 200 {
		store, err := memorystore.New(memorystore.WithSweepInterval(0))
		require.NoError(t, err)
		lim, err := ratelimit.New(store, ratelimit.Policy{Name: "api", Limit: ratelimit.PerSecond(int64(i) + 1)})
		require.NoError(t, err)
		_, err = ratelimit.NewMiddleware(lim, keyByHeader)
		require.NoError(t, err)
		runtime.GC()
	}
	assert.Empty(t, logs.String())
}

// A store in a package-level variable lives outside the heap; it is still
// known, and never collected.
var packageStore failingStore

func TestWarnSharedPolicyNamePackageStore(t *testing.T) {
	logs := captureLogs(t)
	for _, l := range []ratelimit.Limit{ratelimit.PerSecond(5), ratelimit.PerSecond(5), ratelimit.PerSecond(6)} {
		lim, err := ratelimit.New(&packageStore, ratelimit.Policy{Name: "package-store", Limit: l})
		require.NoError(t, err)
		_, err = ratelimit.NewMiddleware(lim, keyByHeader)
		require.NoError(t, err)
	}
	assert.Equal(t, 1, warnings(logs, "shared-policy-name"), logs.String())
}

// Each warning can be turned off on its own, an unknown kind is an error,
// and WarnTo counts KeyByIP's warnings.
func TestWarningsOneByOne(t *testing.T) {
	logs := captureLogs(t)
	w := &countingWarner{kinds: map[string]int{}}
	_, err := ratelimit.KeyByIP(ratelimit.TrustedProxies("0.0.0.0/0"), ratelimit.QuietIP(ratelimit.WarnForwardedWithoutTrustedProxy), ratelimit.WarnTo(w))
	require.NoError(t, err)
	assert.Equal(t, 1, warnings(logs, ratelimit.WarnWideTrustedRange))
	assert.Equal(t, map[string]int{ratelimit.WarnWideTrustedRange: 1}, w.kinds, "told to the Warner too")

	logs.Reset()
	byIP, err := ratelimit.KeyByIP(ratelimit.QuietIP(ratelimit.WarnWideTrustedRange))
	require.NoError(t, err)
	serveKeys(t, byIP, 100)
	assert.Equal(t, 1, warnings(logs, ratelimit.WarnForwardedWithoutTrustedProxy), "only the other IP warning is off")

	logs.Reset()
	one := func(*http.Request) (string, error) { return "everyone", nil }
	serveKeys(t, one, 2*64*256, ratelimit.WithoutWarnings(ratelimit.WarnSharedPolicyName))
	assert.Equal(t, 1, warnings(logs, ratelimit.WarnOneKey), "only the shared-name warning is off")
	logs.Reset()
	serveKeys(t, one, 2*64*256, ratelimit.WithoutWarnings(ratelimit.WarnOneKey))
	assert.Empty(t, logs.String())

	_, err = ratelimit.KeyByIP(ratelimit.QuietIP(ratelimit.WarnOneKey))
	assert.ErrorContains(t, err, "unknown warning")
	store, err := memorystore.New(memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	require.NoError(t, err)
	_, err = ratelimit.NewMiddleware(lim, one, ratelimit.WithoutWarnings("bogus"))
	assert.ErrorContains(t, err, "unknown warning")
	_, err = ratelimit.KeyByIP(ratelimit.WarnTo(nil))
	assert.Error(t, err)
}
