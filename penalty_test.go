package ratelimit_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
)

// TestPenaltyAnswer: the refusal that bans, and every request during the
// ban, is a 429 whose Retry-After is the rest of the ban, and whose
// problem body names the ban and says how long it still lasts.
func TestPenaltyAnswer(t *testing.T) {
	h := newHarness(t, setup{policies: []ratelimit.Policy{{Name: "login", Limit: ratelimit.Per(1, time.Hour),
		Penalty: ratelimit.Penalty{After: 2, Within: time.Minute, For: 10 * time.Minute}}}})
	send := func() (*http.Response, map[string]any) {
		t.Helper()
		w, _ := h.handle(newRequest(t, "/login", "mallory"))
		var body map[string]any
		if w.Code == http.StatusTooManyRequests {
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
		}
		return w.Result(), body
	}
	res, _ := send()
	require.Equal(t, http.StatusOK, res.StatusCode)
	res, body := send()
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	assert.Equal(t, []any{"login"}, body["violated-policies"])
	assert.Equal(t, "3600", res.Header.Get("Retry-After"))

	res, body = send() // the second refusal within a minute bans
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	assert.Equal(t, "600", res.Header.Get("Retry-After"))
	assert.Equal(t, []any{"login/ban"}, body["violated-policies"])
	assert.Equal(t, "Banned after repeated refusals, for 600 s more.", body["detail"])
	assert.Equal(t, []string{`"login";r=0;t=600`}, res.Header["RateLimit"])

	h.clock.Advance(4*time.Minute + 500*time.Millisecond)
	res, body = send()
	assert.Equal(t, "360", res.Header.Get("Retry-After"), "rounded up, never before the ban ends")
	assert.Equal(t, "Banned after repeated refusals, for 360 s more.", body["detail"])
}

// TestPenaltyValidation: a penalty that cannot work is refused by New,
// with the field at fault.
func TestPenaltyValidation(t *testing.T) {
	limit := ratelimit.PerSecond(1)
	store := newHarness(t, setup{limit: limit}).store
	for _, tc := range []struct {
		policy ratelimit.Policy
		want   string
	}{
		{ratelimit.Policy{Limit: limit, Penalty: ratelimit.Penalty{After: -1, For: time.Minute}}, "Penalty.After -1"},
		{ratelimit.Policy{Limit: limit, Penalty: ratelimit.Penalty{Within: time.Minute, For: time.Minute}}, "Penalty.After 0"},
		{ratelimit.Policy{Limit: limit, Penalty: ratelimit.Penalty{After: 1}}, "Penalty.For 0s"},
		{ratelimit.Policy{Limit: limit, Penalty: ratelimit.Penalty{After: 3, For: time.Minute}}, "Penalty.Within 0s"},
		{ratelimit.Policy{Limit: limit, Penalty: ratelimit.Penalty{After: 1, For: time.Minute, Max: time.Second}}, "Penalty.Max 1s: want 0 or at least Penalty.For 1m0s"},
		{ratelimit.Policy{Limit: limit, Global: true, Penalty: ratelimit.Penalty{After: 1, For: time.Minute}}, "Global"},
		{ratelimit.Policy{Limit: limit, DryRun: true, Penalty: ratelimit.Penalty{After: 1, For: time.Minute}}, "DryRun"},
		{ratelimit.Policy{Limit: limit, Algorithm: algo.Ban}, "set Policy.Penalty"},
		{ratelimit.Policy{Limit: limit, Penalty: ratelimit.Penalty{After: 1, For: math.MaxInt64}},
			"Penalty.For 2562047h47m16.854775807s: want at most 438000h0m0s (50 years)"},
		{ratelimit.Policy{Limit: limit, Penalty: ratelimit.Penalty{After: 1, For: time.Hour, Max: 51 * year}},
			"Penalty.Max 446760h0m0s: want at most 438000h0m0s (50 years)"},
		{ratelimit.Policy{Limit: limit, Penalty: ratelimit.Penalty{After: 1, For: time.Minute, Max: 7 * year}},
			"Penalty.Max 61320h0m0s with For 1m0s: remembering 23 bans for 2 × Max each spans more than 50 years; want a shorter Max or a longer For"},
	} {
		_, err := ratelimit.New(store, tc.policy)
		if assert.Error(t, err, "%+v", tc.policy) {
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), `policy "default"`)
		}
	}
	var a ratelimit.Algorithm
	assert.Error(t, a.UnmarshalText([]byte("ban")), "no policy of yours is a ban")
}

const year = 365 * 24 * time.Hour

// TestPenaltyLongBans: the longest bans New accepts are kept as they are:
// a ban of 50 years still holds an hour later, and with a back-off up to a
// year from a ban of an hour, the first ban lasts an hour. (Longer ones
// overflowed the store's int64 times: a ban For MaxInt64 was never stored,
// and a Max of 7 years made the first ban last 7 years.)
func TestPenaltyLongBans(t *testing.T) {
	ctx := context.Background()
	for _, pen := range []ratelimit.Penalty{
		{After: 1, For: 50 * year},
		{After: 1, For: time.Hour, Max: year},
	} {
		h := newHarness(t, setup{policies: []ratelimit.Policy{{Limit: ratelimit.Per(1, time.Hour), Penalty: pen}}})
		lim := h.lim
		res, err := lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		res, err = lim.Take(ctx, "k", 1) // the refusal that bans
		require.NoError(t, err)
		require.False(t, res.Allowed)
		assert.Equal(t, pen.For, res.RetryAfter, "%+v: the first ban lasts For", pen)
		h.clock.Advance(time.Hour - time.Nanosecond)
		res, err = lim.Take(ctx, "k", 1)
		require.NoError(t, err)
		assert.False(t, res.Allowed, "%+v: still banned", pen)
		assert.Equal(t, pen.For-time.Hour+time.Nanosecond, res.RetryAfter, "%+v", pen)
	}
}
