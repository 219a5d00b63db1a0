package ratelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

// countingStore counts the calls that reach the store it wraps.
type countingStore struct {
	ratelimit.Store
	calls atomic.Int64
}

func (s *countingStore) Take(ctx context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	s.calls.Add(1)
	return s.Store.Take(ctx, p, key, cost)
}

// listsSetup is a harness keyed by key (X-Client if nil) with opts, one
// request a minute per key, on a countingStore.
func listsSetup(key ratelimit.KeyFunc, opts *ratelimit.MiddlewareOptions) setup {
	return setup{limit: ratelimit.Per(1, time.Minute), key: key, opts: opts,
		wrap: func(s ratelimit.Store) ratelimit.Store { return &countingStore{Store: s} }}
}

// listsRequest is a request from remoteAddr with header fields, "name:
// value" each, and X-Client: alice.
func listsRequest(remoteAddr string, fields ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/geocode?q=paris", nil)
	r.RemoteAddr = remoteAddr
	r.Header.Set("X-Client", "alice")
	for _, f := range fields {
		name, value, _ := strings.Cut(f, ":")
		r.Header.Add(name, strings.TrimSpace(value))
	}
	return r
}

const forbiddenBody = `{"type":"about:blank","title":"Forbidden","status":403,"detail":"the client's address is blocked"}` + "\n"

func TestAddressLists(t *testing.T) {
	block := []string{"203.0.113.0/24", "2001:db8:bad::/48", "198.51.100.66"}
	safe := []string{"10.0.0.0/8", "2001:db8:5afe::/48", "198.51.100.0/24"}
	proxies := &ratelimit.IPOptions{TrustedProxies: []string{"192.0.2.0/24"}}
	tests := []struct {
		name     string
		opts     ratelimit.MiddlewareOptions
		r        *http.Request
		want     string // "blocked", "safe" or "limited"
		scenario string
	}{
		{"blocked peer", ratelimit.MiddlewareOptions{Block: block}, listsRequest("203.0.113.7:1234"), "blocked", ""},
		{"blocked single address", ratelimit.MiddlewareOptions{Block: block, Safe: safe}, listsRequest("198.51.100.66:1"), "blocked", "block wins over the safe 198.51.100.0/24"},
		{"blocked IPv6", ratelimit.MiddlewareOptions{Block: block}, listsRequest("[2001:db8:bad:1::9]:443"), "blocked", ""},
		{"IPv4-mapped peer", ratelimit.MiddlewareOptions{Block: block}, listsRequest("[::ffff:203.0.113.7]:1234"), "blocked", "::ffff:203.0.113.7 is 203.0.113.7"},
		{"IPv4-mapped entry", ratelimit.MiddlewareOptions{Block: []string{"::ffff:203.0.113.0/120"}}, listsRequest("203.0.113.7:1234"), "blocked", "::ffff:203.0.113.0/120 is 203.0.113.0/24"},
		{"unmasked entry", ratelimit.MiddlewareOptions{Block: []string{"203.0.113.99/24"}}, listsRequest("203.0.113.7:1234"), "blocked", ""},
		{"IPv6 prefix and IPv4 client", ratelimit.MiddlewareOptions{Block: []string{"::/0"}}, listsRequest("203.0.113.7:1234"), "limited", "an IPv6 prefix never matches an IPv4 address"},
		{"both lists", ratelimit.MiddlewareOptions{Block: []string{"10.1.0.0/16"}, Safe: []string{"10.0.0.0/8"}}, listsRequest("10.1.2.3:1234"), "blocked", "block wins"},
		{"safe peer", ratelimit.MiddlewareOptions{Block: block, Safe: safe}, listsRequest("10.1.2.3:1234"), "safe", ""},
		{"safe IPv6", ratelimit.MiddlewareOptions{Safe: safe}, listsRequest("[2001:db8:5afe::1]:443"), "safe", ""},
		{"safe IPv4-mapped", ratelimit.MiddlewareOptions{Safe: safe}, listsRequest("[::ffff:10.9.9.9]:443"), "safe", ""},
		{"unlisted", ratelimit.MiddlewareOptions{Block: block, Safe: safe}, listsRequest("192.0.2.200:1234"), "limited", ""},
		{"blocked on a skipped path", ratelimit.MiddlewareOptions{Block: block, Skip: func(*http.Request) bool { return true }}, listsRequest("203.0.113.7:1234"), "blocked", "Block comes before Skip"},

		// Forwarding headers, believed only from a trusted proxy.
		{"forged, no proxy trusted", ratelimit.MiddlewareOptions{Safe: safe}, listsRequest("198.18.0.1:1234", "X-Forwarded-For: 10.0.0.1"), "limited", "the peer forges a safe address"},
		{"forged, untrusted peer", ratelimit.MiddlewareOptions{Safe: safe, ClientIP: proxies}, listsRequest("198.18.0.1:1234", "X-Forwarded-For: 10.0.0.1"), "limited", "the peer is not a trusted proxy"},
		{"forged Forwarded, untrusted peer", ratelimit.MiddlewareOptions{Safe: safe, ClientIP: &ratelimit.IPOptions{TrustedProxies: proxies.TrustedProxies, Header: "Forwarded"}},
			listsRequest("198.18.0.1:1234", "Forwarded: for=10.0.0.1"), "limited", ""},
		{"forged, behind a trusted proxy", ratelimit.MiddlewareOptions{Safe: safe, ClientIP: proxies}, listsRequest("192.0.2.1:1234", "X-Forwarded-For: 10.0.0.1, 198.18.0.1"), "limited", "the client prepended a safe address"},
		{"forged, blocked behind a trusted proxy", ratelimit.MiddlewareOptions{Block: block, Safe: safe, ClientIP: proxies}, listsRequest("192.0.2.1:1234", "X-Forwarded-For: 10.0.0.1, 203.0.113.7"), "blocked", ""},
		{"blocked behind a trusted proxy", ratelimit.MiddlewareOptions{Block: block, ClientIP: proxies}, listsRequest("192.0.2.1:1234", "X-Forwarded-For: 203.0.113.7"), "blocked", ""},
		{"blocked behind two trusted proxies", ratelimit.MiddlewareOptions{Block: block, ClientIP: proxies}, listsRequest("192.0.2.1:1234", "X-Forwarded-For: 203.0.113.7, 192.0.2.9"), "blocked", ""},
		{"safe behind a trusted proxy", ratelimit.MiddlewareOptions{Safe: safe, ClientIP: proxies}, listsRequest("192.0.2.1:1234", "X-Forwarded-For: 10.0.0.1"), "safe", ""},
		{"blocked Forwarded behind a trusted proxy", ratelimit.MiddlewareOptions{Block: block, ClientIP: &ratelimit.IPOptions{TrustedProxies: proxies.TrustedProxies, Header: "Forwarded"}},
			listsRequest("192.0.2.1:1234", `Forwarded: for="[2001:db8:bad::1]:443"`), "blocked", ""},
		{"blocked X-Real-IP behind a trusted proxy", ratelimit.MiddlewareOptions{Block: block, ClientIP: &ratelimit.IPOptions{TrustedProxies: proxies.TrustedProxies, Header: "X-Real-IP"}},
			listsRequest("192.0.2.1:1234", "X-Real-IP: ::ffff:203.0.113.7"), "blocked", ""},
		{"safe proxy, unlisted client", ratelimit.MiddlewareOptions{Safe: []string{"192.0.2.0/24"}, ClientIP: proxies}, listsRequest("192.0.2.1:1234", "X-Forwarded-For: 198.18.0.1"), "limited", "the proxy's own address is not the client's"},
		{"proxy not configured", ratelimit.MiddlewareOptions{Safe: []string{"192.0.2.0/24"}}, listsRequest("192.0.2.1:1234", "X-Forwarded-For: 198.18.0.1"), "safe", "without ClientIP the proxy is the client"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.Quiet = true
			opts.Logger = discardLogger()
			s := newHarness(t, listsSetup(nil, &opts))
			store := s.store.(*countingStore)
			for i := range 3 { // one request a minute: the second is refused unless safe
				w := httptest.NewRecorder()
				s.ServeHTTP(w, tc.r.Clone(tc.r.Context()))
				switch tc.want {
				case "blocked":
					assert.Equal(t, http.StatusForbidden, w.Code, "%s: request %d", tc.scenario, i)
					assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
					assert.Equal(t, "no-store", w.Header().Get("Cache-Control"))
					assert.Equal(t, forbiddenBody, w.Body.String())
					assert.Empty(t, w.Header().Get("Retry-After"))
					assert.Empty(t, field(w.Header(), "RateLimit"))
					assert.Empty(t, field(w.Header(), "RateLimit-Policy"))
				case "safe":
					assert.Equal(t, http.StatusOK, w.Code, "%s: request %d", tc.scenario, i)
					assert.Empty(t, field(w.Header(), "RateLimit"), "a safe client gets no rate-limit fields")
					assert.Empty(t, field(w.Header(), "RateLimit-Policy"))
				case "limited":
					want := http.StatusOK
					if i > 0 {
						want = http.StatusTooManyRequests
					}
					assert.Equal(t, want, w.Code, "%s: request %d", tc.scenario, i)
					assert.NotEmpty(t, field(w.Header(), "RateLimit"))
				}
			}
			switch tc.want {
			case "blocked":
				assert.Zero(t, store.calls.Load(), "store calls for a blocked client")
				assert.Zero(t, s.calls.Load(), "runs of the handler for a blocked client")
			case "safe":
				assert.Zero(t, store.calls.Load(), "store calls for a safe client")
				assert.EqualValues(t, 3, s.calls.Load())
			case "limited":
				assert.EqualValues(t, 3, store.calls.Load())
				assert.EqualValues(t, 1, s.calls.Load())
			}
		})
	}
}

// TestAddressListsWhateverTheKey: the lists find the client through
// ClientIP also when the key is an API key, and a request whose client
// cannot be found is answered as KeyByIP answers it, before the key
// function and the store.
func TestAddressListsWhateverTheKey(t *testing.T) {
	proxies := &ratelimit.IPOptions{TrustedProxies: []string{"192.0.2.0/24"}}
	byIP, err := ratelimit.KeyByIP(proxies)
	require.NoError(t, err)
	tests := []struct {
		name   string
		r      *http.Request
		status int
		detail string
	}{
		{"blocked", listsRequest("192.0.2.1:1", "X-API-Key: k", "X-Forwarded-For: 203.0.113.7"), http.StatusForbidden, "the client's address is blocked"},
		{"safe without an API key", listsRequest("192.0.2.1:1", "X-Forwarded-For: 10.0.0.1"), http.StatusOK, ""},
		{"unlisted without an API key", listsRequest("192.0.2.1:1", "X-Forwarded-For: 198.18.0.1"), http.StatusUnauthorized, "the request carries no X-API-Key header"},
		{"unlisted", listsRequest("192.0.2.1:1", "X-API-Key: k", "X-Forwarded-For: 198.18.0.1"), http.StatusOK, ""},
		{"bad RemoteAddr", listsRequest("somewhere", "X-API-Key: k"), http.StatusBadRequest, "the request's remote address is not an IP address"},
		{"bad forwarding entry", listsRequest("192.0.2.1:1", "X-API-Key: k", "X-Forwarded-For: unknown"), http.StatusBadRequest,
			"the trusted proxy sent an X-Forwarded-For entry that is not an IP address"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var events []ratelimit.Event
			s := newHarness(t, listsSetup(ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{
				Block: []string{"203.0.113.0/24"}, Safe: []string{"10.0.0.0/8"}, ClientIP: proxies,
				Observe: func(_ *http.Request, ev ratelimit.Event) { events = append(events, ev) },
				Logger:  discardLogger(),
			}))
			store := s.store.(*countingStore)
			w := serve(s, tc.r)
			require.Equal(t, tc.status, w.Code)
			if tc.detail != "" {
				assert.Contains(t, w.Body.String(), `"detail":"`+tc.detail+`"`)
			}
			if tc.status == http.StatusBadRequest {
				// KeyByIP answers the same request the same way.
				kw := httptest.NewRecorder()
				_, err := byIP(tc.r)
				require.Error(t, err)
				ratelimit.DefaultErrorHandler(kw, tc.r, err)
				assert.Equal(t, kw.Body.String(), w.Body.String(), "the answer of KeyByIP's error")
				assert.Zero(t, store.calls.Load())
				require.Len(t, events, 1, "the error is observed")
				assert.ErrorIs(t, events[0].Err, ratelimit.ErrBadRequest)
			}
			if tc.status == http.StatusForbidden || tc.name == "safe without an API key" {
				assert.Zero(t, store.calls.Load())
				assert.Empty(t, events, "blocked and safe requests are not decided, so not observed")
			}
		})
	}
}

func TestAddressListsErrors(t *testing.T) {
	tests := []struct {
		name string
		opts ratelimit.MiddlewareOptions
		want string
	}{
		{"bad length", ratelimit.MiddlewareOptions{Block: []string{"10.0.0.0/33"}},
			`ratelimit: MiddlewareOptions.Block entry "10.0.0.0/33": want a CIDR prefix or an IP address`},
		{"bad address", ratelimit.MiddlewareOptions{Safe: []string{"10.0.0.0/8", "10.0.0.256"}},
			`ratelimit: MiddlewareOptions.Safe entry "10.0.0.256": want a CIDR prefix or an IP address`},
		{"host name", ratelimit.MiddlewareOptions{Block: []string{"scraper.example"}},
			`ratelimit: MiddlewareOptions.Block entry "scraper.example": want a CIDR prefix or an IP address`},
		{"IPv6 too long", ratelimit.MiddlewareOptions{Safe: []string{"2001:db8::/129"}},
			`ratelimit: MiddlewareOptions.Safe entry "2001:db8::/129": want a CIDR prefix or an IP address`},
		{"zone in a prefix", ratelimit.MiddlewareOptions{Block: []string{"fe80::%eth0/64"}},
			`ratelimit: MiddlewareOptions.Block entry "fe80::%eth0/64": want a CIDR prefix or an IP address`},
		{"spaces trimmed", ratelimit.MiddlewareOptions{Block: []string{" 10.0.0.0/8", " nope "}},
			`ratelimit: MiddlewareOptions.Block entry "nope": want a CIDR prefix or an IP address`},
		{"bad trusted proxy", ratelimit.MiddlewareOptions{Block: []string{"10.0.0.0/8"}, ClientIP: &ratelimit.IPOptions{TrustedProxies: []string{"lb.internal"}}},
			`ratelimit: MiddlewareOptions.ClientIP: TrustedProxies entry "lb.internal": want a CIDR prefix or an IP address`},
		{"bad trusted proxy without lists", ratelimit.MiddlewareOptions{ClientIP: &ratelimit.IPOptions{TrustedProxies: []string{"lb.internal"}}},
			`ratelimit: MiddlewareOptions.ClientIP: TrustedProxies entry "lb.internal": want a CIDR prefix or an IP address`},
		{"bad header", ratelimit.MiddlewareOptions{Safe: []string{"10.0.0.0/8"}, ClientIP: &ratelimit.IPOptions{Header: "X-Client-IP"}},
			`ratelimit: MiddlewareOptions.ClientIP: Header "X-Client-IP": want X-Forwarded-For, Forwarded or X-Real-IP`},
	}
	lim := newHarness(t, setup{limit: ratelimit.PerSecond(1)}).lim
	for _, tc := range tests {
		m, err := ratelimit.NewMiddleware(lim, keyByHeader, &tc.opts)
		assert.EqualError(t, err, tc.want, tc.name)
		assert.Nil(t, m, tc.name)
	}
	// Empty entries, as strings.Split("", ",") gives, are no list.
	for _, o := range []ratelimit.MiddlewareOptions{
		{Block: strings.Split("", ","), Safe: strings.Split("", ",")},
		{Block: []string{" ", ""}, ClientIP: &ratelimit.IPOptions{TrustedProxies: []string{"10.0.0.0/8"}}},
	} {
		_, err := ratelimit.NewMiddleware(lim, keyByHeader, &o)
		assert.NoError(t, err, "Block %q, Safe %q", o.Block, o.Safe)
	}
}
