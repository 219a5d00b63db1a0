package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPenaltyBox: -ban-after 3 -ban-within 1m -ban-for 10m bans a client at
// its third refusal in a row, in every framework: a 429 naming the ban,
// with the rest of the ban in Retry-After, until it ends; other clients
// are not banned, and the admin reset lifts a ban.
func TestPenaltyBox(t *testing.T) {
	for _, framework := range []string{"nethttp", "gin", "echo"} {
		h, clock := newTestHandler(t, "-framework", framework, "-key", "ip", "-rate", "0.001", "-burst", "2",
			"-ban-after", "3", "-ban-within", "1m", "-ban-for", "10m", "-admin-token", adminToken)
		mallory := request{target: "/geocode?q=paris", remoteAddr: "198.51.100.7:1234"}
		alice := request{target: "/geocode?q=paris", remoteAddr: "198.51.100.8:1234"}
		require.Equal(t, []int{200, 200, 429, 429}, statuses(h, mallory, 4), framework)
		w := serve(h, mallory)
		require.Equal(t, http.StatusTooManyRequests, w.Code, framework)
		assert.Equal(t, "600", w.Header().Get("Retry-After"), framework)
		assert.Contains(t, w.Body.String(), `"detail":"Banned after repeated refusals, for 600 s more.","violated-policies":["default/ban"]`, framework)
		assert.Equal(t, []int{200, 200, 429}, statuses(h, alice, 3), "%s: alice is not banned", framework)

		clock.Advance(10*time.Minute - time.Second)
		w = serve(h, mallory)
		assert.Equal(t, "1", w.Header().Get("Retry-After"), framework)
		assert.Contains(t, w.Body.String(), `"violated-policies":["default/ban"]`, framework)
		clock.Advance(time.Second)
		w = serve(h, mallory)
		assert.Contains(t, w.Body.String(), `"violated-policies":["default"]`, "%s: the ban is over, the bucket is not full", framework)
		clock.Advance(time.Hour)
		assert.Equal(t, []int{200, 200, 429, 429, 429}, statuses(h, mallory, 5), framework)
		require.Equal(t, http.StatusNoContent, adminReset(h, "POST", "198.51.100.7", "Bearer "+adminToken).Code)
		assert.Equal(t, []int{200, 200, 429}, statuses(h, mallory, 3), "%s: the reset lifts the ban", framework)
	}
}

// TestPenaltyFlagsInvalid: the penalty box's flags are checked together.
func TestPenaltyFlagsInvalid(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-ban-after", "-1"}, "-ban-after -1: want a number of refusals, or 0 for no penalty box"},
		{[]string{"-ban-for", "1m"}, "-ban-after 0: -ban-within and -ban-for need -ban-after"},
		{[]string{"-ban-after", "3", "-ban-within", "1m"}, "-ban-for 0s: want a positive duration with -ban-after"},
		{[]string{"-ban-after", "3", "-ban-for", "1m"}, "-ban-within 0s: want a positive duration with -ban-after above 1"},
		{[]string{"-ban-after", "3", "-ban-within", "1m", "-ban-for", "1m", "-dry-run"}, "-ban-after 3 -ban-within 1m0s -ban-for 1m0s -dry-run: ratelimit: policy \"default\": Penalty on a DryRun policy"},
		{[]string{"-ban-after", "3", "-ban-within", "1ns", "-ban-for", "1m"}, "-ban-within 1ns -ban-for 1m0s: ratelimit: policy \"default\": Penalty: 2 strikes within 1ns"},
		{[]string{"-lease", "50ms"}, "-lease 50ms: needs -store redis"},
	} {
		code, stderr := runExit(t, tc.args...)
		assert.Equal(t, 2, code, "%v", tc.args)
		assert.Contains(t, stderr, tc.want, "%v", tc.args)
	}
}
