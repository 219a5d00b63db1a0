package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit/storetest"
)

const adminToken = "s3cret-Token_1~+/=="

// adminReset sends POST /admin/reset?key=key (no key parameter when key is
// "-") with the Authorization field auth, if not empty.
func adminReset(h http.Handler, method, key, auth string) *httptest.ResponseRecorder {
	return adminResetFrom(h, "", method, key, auth)
}

// adminResetFrom is adminReset from the client address remote
// (httptest's 192.0.2.1:1234 when empty).
func adminResetFrom(h http.Handler, remote, method, key, auth string) *httptest.ResponseRecorder {
	target := "/admin/reset"
	if key != "-" {
		target += "?key=" + key
	}
	r := httptest.NewRequest(method, target, nil)
	if remote != "" {
		r.RemoteAddr = remote
	}
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// The worked example: a client that spent its burst is reset and has it
// whole again; another client keeps what it had.
func TestAdminResetAPIKey(t *testing.T) {
	h, _ := newTestHandler(t, "-burst", "3", "-admin-token", adminToken)
	alice, bob := request{target: "/geocode?q=paris", apiKey: "alice"}, request{target: "/geocode?q=paris", apiKey: "bob"}
	require.Equal(t, []int{200, 200, 200, 429}, statuses(h, alice, 4))
	require.Equal(t, []int{200}, statuses(h, bob, 1))

	w := adminReset(h, "POST", "alice", "Bearer "+adminToken)
	assert.Equal(t, http.StatusNoContent, w.Code)
	assert.Empty(t, w.Body.String())
	assert.Equal(t, []int{200, 200, 200, 429}, statuses(h, alice, 4), "alice starts full")
	assert.Equal(t, []int{200, 200, 429}, statuses(h, bob, 3), "bob keeps what he had")

	w = adminReset(h, "POST", "never-seen", "Bearer "+adminToken)
	assert.Equal(t, http.StatusNoContent, w.Code, "a client the server never saw")
	w = adminReset(h, "POST", "alice", "bearer  "+adminToken)
	assert.Equal(t, http.StatusNoContent, w.Code, "the scheme in any case, spaces before the token")
	w = adminReset(h, "POST", "%20", "Bearer "+adminToken)
	assert.Equal(t, http.StatusBadRequest, w.Code, "an empty API key")
	assert.Contains(t, w.Body.String(), "the key is empty")
}

// The Global policy, which every client shares, is not reset.
func TestAdminResetLeavesGlobal(t *testing.T) {
	h, _ := newTestHandler(t, "-burst", "3", "-global-rate", "1", "-global-burst", "4", "-admin-token", adminToken)
	alice, bob := request{target: "/geocode?q=paris", apiKey: "alice"}, request{target: "/geocode?q=paris", apiKey: "bob"}
	require.Equal(t, []int{200, 200, 200, 429}, statuses(h, alice, 4))
	require.Equal(t, http.StatusNoContent, adminReset(h, "POST", "alice", "Bearer "+adminToken).Code)
	assert.Equal(t, []int{200, 429}, statuses(h, bob, 2), "one global token was left")
	w := serve(h, alice)
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Contains(t, w.Body.String(), `"violated-policies":["global"]`, "alice's own bucket is full, the global one empty")
}

// With -key ip the key is the client's address, as the server finds it:
// behind a trusted proxy, the one X-Forwarded-For names. The limiter's key
// for it, "ip:" and the address, is taken too, and addresses are
// normalised as KeyByIP does.
func TestAdminResetIP(t *testing.T) {
	h, _ := newTestHandler(t, "-burst", "2", "-key", "ip", "-trusted-proxies", "10.0.0.0/8", "-admin-token", adminToken)
	direct := request{target: "/geocode?q=paris", remoteAddr: "203.0.113.7:4711"}
	proxied := request{target: "/geocode?q=paris", remoteAddr: "10.1.2.3:80", forwardedFor: "2001:db8::1"}
	for _, tc := range []struct {
		client request
		key    string
	}{
		{direct, "203.0.113.7"},
		{direct, "ip:203.0.113.7"},
		{direct, "::ffff:203.0.113.7"},
		{proxied, "2001:db8::1"},
		{proxied, "2001:DB8:0::1"},
		{proxied, "[2001:db8::1]"},
	} {
		require.Equal(t, 429, statuses(h, tc.client, 3)[2], "drained before reset with %q", tc.key)
		w := adminReset(h, "POST", tc.key, "Bearer "+adminToken)
		require.Equal(t, http.StatusNoContent, w.Code, "key=%s: %s", tc.key, w.Body)
		assert.Equal(t, []int{200, 200, 429}, statuses(h, tc.client, 3), "after reset with key=%s", tc.key)
	}
	for _, key := range []string{"alice", "203.0.113", "ip:", "0.0.0.0"} {
		w := adminReset(h, "POST", key, "Bearer "+adminToken)
		assert.Equal(t, http.StatusBadRequest, w.Code, "key=%s", key)
		assert.Contains(t, w.Body.String(), "the key is not an IP address", "key=%s", key)
		assert.NotContains(t, w.Body.String(), key+`"`, "the key is not echoed")
	}
}

// A wrong or missing token gets 401 and resets nothing. (Each comes from
// its own address: failures are limited per address.)
func TestAdminUnauthorized(t *testing.T) {
	h, _ := newTestHandler(t, "-burst", "1", "-admin-token", adminToken)
	alice := request{target: "/geocode?q=paris", apiKey: "alice"}
	require.Equal(t, []int{200, 429}, statuses(h, alice, 2))
	for i, auth := range []string{
		"",
		"Bearer",
		"Bearer ",
		"Bearer wrong",
		"Bearer " + adminToken[:len(adminToken)-1],
		"Bearer " + adminToken + "x",
		"Basic " + adminToken,
		adminToken,
		"Bearer" + adminToken,
		"Bearer " + adminToken + " ",
	} {
		w := adminResetFrom(h, fmt.Sprintf("198.51.100.%d:1234", i), "POST", "alice", auth)
		assert.Equal(t, http.StatusUnauthorized, w.Code, "Authorization: %q", auth)
		assert.Equal(t, `Bearer realm="admin"`, w.Header().Get("WWW-Authenticate"))
		assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
		assert.NotContains(t, w.Body.String(), adminToken)
	}
	assert.Equal(t, []int{429}, statuses(h, alice, 1), "nothing was reset")
}

func TestAdminMethodAndKey(t *testing.T) {
	h, _ := newTestHandler(t, "-admin-token", adminToken)
	for _, method := range []string{"GET", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS"} {
		w := adminReset(h, method, "alice", "Bearer "+adminToken)
		assert.Equal(t, http.StatusMethodNotAllowed, w.Code, method)
		assert.Equal(t, "POST", w.Header().Get("Allow"), method)
	}
	for _, key := range []string{"-", ""} {
		w := adminReset(h, "POST", key, "Bearer "+adminToken)
		assert.Equal(t, http.StatusBadRequest, w.Code, "key=%q", key)
		assert.Contains(t, w.Body.String(), "missing query parameter key")
	}
}

// The admin endpoint is never limited nor counted, in every framework, and
// without -admin-token it does not exist.
func TestAdminNeverLimited(t *testing.T) {
	for _, framework := range []string{"nethttp", "gin", "echo"} {
		t.Run(framework, func(t *testing.T) {
			h, _ := newTestHandler(t, "-framework", framework, "-burst", "1", "-global-rate", "1", "-global-burst", "1", "-admin-token", adminToken)
			for range 5 {
				w := adminReset(h, "POST", "alice", "Bearer "+adminToken)
				require.Equal(t, http.StatusNoContent, w.Code)
				assert.Empty(t, field(w.Header(), "RateLimit"), "no rate-limit fields")
			}
			w := adminReset(h, "POST", "alice", "")
			assert.Equal(t, http.StatusUnauthorized, w.Code, "not the limiter's 401")
			assert.Equal(t, `Bearer realm="admin"`, w.Header().Get("WWW-Authenticate"))
			assert.Equal(t, []int{200, 429}, statuses(h, request{target: "/geocode?q=paris", apiKey: "bob"}, 2), "the global token was not spent")

			h, _ = newTestHandler(t, "-framework", framework, "-admin-token", adminToken)
			other := serve(h, request{method: "POST", target: "/admin/other", apiKey: "carol"})
			assert.Equal(t, http.StatusNotFound, other.Code, "other admin paths do not exist")

			h, _ = newTestHandler(t, "-framework", framework, "-key", "ip")
			w = adminReset(h, "POST", "alice", "Bearer "+adminToken)
			assert.Equal(t, http.StatusNotFound, w.Code, "without -admin-token")
		})
	}
}

// Without -admin-token, and with -key api-key, the path is one of the
// API's unknown paths: 404 to a request that carries an API key.
func TestAdminWithoutToken(t *testing.T) {
	h, _ := newTestHandler(t)
	w := serve(h, request{method: "POST", target: "/admin/reset?key=alice", apiKey: "alice"})
	assert.Equal(t, http.StatusNotFound, w.Code)
}

// A store that fails makes the reset 503, with Retry-After.
func TestAdminStoreDown(t *testing.T) {
	h, _ := newTestHandler(t, "-store", "redis", "-redis-url", "redis://127.0.0.1:1/0", "-on-store-error", "local", "-admin-token", adminToken)
	w := adminReset(h, "POST", "alice", "Bearer "+adminToken)
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.NotContains(t, w.Body.String(), "127.0.0.1", "no error text in the body")
}

func TestAdminTokenFlag(t *testing.T) {
	for _, token := range []string{"has space", "tab\t", "ünïcode", "=abc", "a=b", "\"quoted\""} {
		code, stderr := runExit(t, "-admin-token", token)
		assert.Equal(t, 2, code, "-admin-token %q", token)
		assert.Contains(t, stderr, "-admin-token: want the characters of a bearer token", "-admin-token %q", token)
		assert.NotContains(t, stderr, token, "the token is not logged")
	}
	_, err := withAdmin(http.NotFoundHandler(), "abc", nil, "user-id", nil, nil, nil)
	assert.ErrorContains(t, err, "-key user-id")
	assert.True(t, isBearerToken("abc-._~+/=="))
	assert.False(t, isBearerToken(strings.Repeat("=", 3)))
}

// newLoggedHandler is newTestHandler with the server's log in a buffer.
func newLoggedHandler(t *testing.T, args ...string) (http.Handler, *storetest.Clock, *bytes.Buffer) {
	t.Helper()
	logs := new(bytes.Buffer)
	h, clock := newHandlerWith(t, func(cfg *config) { cfg.logHandler = slog.NewTextHandler(logs, nil) }, args...)
	return h, clock, logs
}

// adminFailureLines counts the log lines of failed admin tokens.
func adminFailureLines(logs *bytes.Buffer) int {
	return strings.Count(logs.String(), "admin request without the admin token")
}

// countCodes returns how many of each status the admin requests of
// remote(i), i < n, with auth got, and the Retry-After of the last 429.
func countCodes(h http.Handler, n int, remote func(i int) string, auth string) (map[int]int, string) {
	codes, retry := map[int]int{}, ""
	for i := range n {
		w := adminResetFrom(h, remote(i), "POST", "alice", auth)
		codes[w.Code]++
		if w.Code == http.StatusTooManyRequests {
			retry = w.Header().Get("Retry-After")
		}
	}
	return codes, retry
}

// A flood of wrong tokens from one address: 5 get 401, then the address
// gets 429 with Retry-After for every admin request, the right token
// included, until a failure is forgiven 12 s later; others are not
// affected. The flood is logged once a minute, not once a request.
func TestAdminFloodOneClient(t *testing.T) {
	h, clock, logs := newLoggedHandler(t, "-admin-token", adminToken)
	attacker := func(int) string { return "203.0.113.9:4000" }
	codes, retry := countCodes(h, 300, attacker, "Bearer wrong")
	assert.Equal(t, map[int]int{401: 5, 429: 295}, codes)
	assert.Equal(t, "12", retry, "one failure is forgiven every 12 s")
	assert.Equal(t, 1, adminFailureLines(logs), "300 failures, one line")

	assert.Equal(t, http.StatusTooManyRequests, adminResetFrom(h, "203.0.113.9:4000", "POST", "alice", "Bearer "+adminToken).Code,
		"the right token from a limited address: no oracle")
	assert.Equal(t, http.StatusNoContent, adminResetFrom(h, "198.51.100.1:4000", "POST", "alice", "Bearer "+adminToken).Code,
		"another address is not limited")

	clock.Advance(12 * time.Second)
	assert.Equal(t, http.StatusNoContent, adminResetFrom(h, "203.0.113.9:4000", "POST", "alice", "Bearer "+adminToken).Code)
	clock.Advance(adminLogEvery)
	codes, _ = countCodes(h, 1, attacker, "Bearer wrong")
	assert.Equal(t, map[int]int{401: 1}, codes)
	assert.Equal(t, 2, adminFailureLines(logs), "a minute later, one more line")
	assert.Contains(t, logs.String(), "unlogged_since_last=300", "the line counts the failures left unlogged")
}

// A flood of wrong tokens from many addresses: 60 a minute in all get
// 401, the others 429; then the endpoint refuses everybody until the
// global bucket refills (one failure a second), the admin included: the
// price of bounding the guesses in all. One line a minute is logged.
func TestAdminFloodManyClients(t *testing.T) {
	h, clock, logs := newLoggedHandler(t, "-key", "ip", "-admin-token", adminToken)
	many := func(i int) string { return fmt.Sprintf("10.%d.%d.1:4000", i/256, i%256) }
	codes, retry := countCodes(h, 300, many, "")
	assert.Equal(t, map[int]int{401: 60, 429: 240}, codes)
	assert.Equal(t, "1", retry, "one failure in all is forgiven every second")
	assert.Equal(t, 1, adminFailureLines(logs), "300 failures, one line")

	w := adminResetFrom(h, "198.51.100.1:4000", "POST", "198.51.100.7", "Bearer "+adminToken)
	assert.Equal(t, http.StatusTooManyRequests, w.Code, "the global bucket is empty")
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	clock.Advance(time.Second)
	w = adminResetFrom(h, "198.51.100.1:4000", "POST", "198.51.100.7", "Bearer "+adminToken)
	assert.Equal(t, http.StatusNoContent, w.Code, "a second later")
}
