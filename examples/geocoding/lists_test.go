package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const forbidden = `{"type":"about:blank","title":"Forbidden","status":403,"detail":"the client's address is blocked"}` + "\n"

// TestBlockAndSafe: -block answers 403 before any limiting and -safe is
// never limited, with either key, in every framework; the client address is
// found through -trusted-proxies, so a forged X-Forwarded-For buys nothing.
func TestBlockAndSafe(t *testing.T) {
	type step struct {
		name string
		req  request
		want []int // statuses of consecutive requests
		safe bool
	}
	const q = "/geocode?q=rome"
	for _, tc := range []struct {
		args  []string
		steps []step
	}{
		{
			args: []string{"-key", "ip", "-block", "203.0.113.0/24", "-safe", "10.0.0.0/8"},
			steps: []step{
				{"blocked", request{target: q, remoteAddr: "203.0.113.7:1234"}, repeat(403, 3), false},
				{"blocked IPv4-mapped", request{target: q, remoteAddr: "[::ffff:203.0.113.8]:1234"}, repeat(403, 2), false},
				{"blocked, /healthz is outside the limiter", request{target: "/healthz", remoteAddr: "203.0.113.7:1234"}, []int{200}, false},
				{"safe", request{target: q, remoteAddr: "10.1.2.3:1234"}, repeat(200, 5), true},
				{"unlisted", request{target: q, remoteAddr: "198.51.100.8:1234"}, []int{200, 200, 429}, false},
				{"forged safe address", request{target: q, remoteAddr: "198.51.100.9:1234", forwardedFor: "10.0.0.1"}, []int{200, 200, 429}, false},
			},
		},
		{
			args: []string{"-key", "api-key", "-trusted-proxies", "192.0.2.0/24", "-block", "203.0.113.0/24", "-safe", "10.0.0.0/8,2001:db8::/32"},
			steps: []step{
				{"blocked behind the proxy", request{target: q, apiKey: "k1", remoteAddr: "192.0.2.1:1234", forwardedFor: "203.0.113.7"}, repeat(403, 3), false},
				{"blocked, a safe address prepended", request{target: q, apiKey: "k2", remoteAddr: "192.0.2.1:1234", forwardedFor: "10.0.0.1, 203.0.113.7"}, repeat(403, 2), false},
				{"safe behind the proxy, no API key", request{target: q, remoteAddr: "192.0.2.1:1234", forwardedFor: "10.0.0.1"}, repeat(200, 5), true},
				{"safe IPv6", request{target: q, remoteAddr: "192.0.2.1:1234", forwardedFor: "2001:db8::1"}, repeat(200, 3), true},
				{"unlisted, no API key", request{target: q, remoteAddr: "192.0.2.1:1234", forwardedFor: "198.51.100.8"}, []int{401}, false},
				{"unlisted", request{target: q, apiKey: "k3", remoteAddr: "192.0.2.1:1234", forwardedFor: "198.51.100.8"}, []int{200, 200, 429}, false},
				{"forged, not through the proxy", request{target: q, apiKey: "k4", remoteAddr: "198.51.100.9:1234", forwardedFor: "10.0.0.1"}, []int{200, 200, 429}, false},
				{"blocked, not through the proxy", request{target: q, apiKey: "k5", remoteAddr: "203.0.113.9:1234", forwardedFor: "198.51.100.1"}, []int{403}, false},
			},
		},
	} {
		for _, framework := range []string{"nethttp", "gin", "echo"} {
			args := append([]string{"-framework", framework, "-rate", "1", "-burst", "2"}, tc.args...)
			h, _ := newTestHandler(t, args...)
			for _, s := range tc.steps {
				for i, want := range s.want {
					w := serve(h, s.req)
					require.Equal(t, want, w.Code, "%v: %s: request %d", args, s.name, i+1)
					switch want {
					case http.StatusForbidden:
						assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"), "%v: %s", args, s.name)
						assert.Equal(t, forbidden, w.Body.String(), "%v: %s", args, s.name)
						assert.Empty(t, w.Header().Get("Retry-After"), "%v: %s", args, s.name)
						assert.Empty(t, field(w.Header(), "RateLimit"), "%v: %s: a blocked request is not limited", args, s.name)
					case http.StatusOK:
						if s.safe {
							assert.Empty(t, field(w.Header(), "RateLimit"), "%v: %s: a safe request is not limited", args, s.name)
						} else if s.req.target == q {
							assert.NotEmpty(t, field(w.Header(), "RateLimit"), "%v: %s", args, s.name)
						}
					}
				}
			}
		}
	}
}

func TestBlockAndSafeInvalid(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-block", "203.0.113.0/33"}, `geocoding: -block, -safe: ratelimit: MiddlewareOptions.Block entry "203.0.113.0/33": want a CIDR prefix or an IP address`},
		{[]string{"-key", "ip", "-safe", "10.0.0.0/8,office"}, `geocoding: -block, -safe: ratelimit: MiddlewareOptions.Safe entry "office": want a CIDR prefix or an IP address`},
		{[]string{"-block", "10.0.0.256"}, `geocoding: -block, -safe: ratelimit: MiddlewareOptions.Block entry "10.0.0.256": want a CIDR prefix or an IP address`},
	} {
		code, stderr := runExit(t, tc.args...)
		assert.Equal(t, 2, code, "%v", tc.args)
		assert.Contains(t, stderr, tc.want, "%v", tc.args)
		assert.NotContains(t, stderr, "listening", "%v", tc.args)
	}
	// Empty lists, and lists with spaces, are accepted.
	for _, args := range [][]string{
		{"-block", "", "-safe", ""},
		{"-block", "203.0.113.0/24, 198.51.100.7", "-safe", " 10.0.0.0/8 ,"},
	} {
		newTestHandler(t, args...)
	}
}
