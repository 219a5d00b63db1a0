package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
	"github.com/tokenfair/ratelimit/internal/refusers"
)

// testBan: the Ban algorithm, a penalty box's ban, whose state is the time
// it ends: a request of cost 0 asks and is refused until then, to the
// nanosecond; a positive cost bans for that many nanoseconds, but is
// refused, and changes nothing, while a ban is on; a batch with a banned
// key's question spends nothing.
func testBan(t *testing.T, c *Clock, s ratelimit.Store) {
	ban := &ratelimit.Policy{Name: "p/ban", Limit: ratelimit.Per(1, time.Nanosecond), Algorithm: algo.Ban}
	run(t, c, s, ban, []step{
		{cost: 0, want: allowed(0, 0)},
		{cost: int64(time.Minute), want: allowed(0, time.Minute)},
		{cost: 0, want: refused(0, time.Minute, time.Minute)},
		{advance: time.Minute - 1, cost: 0, want: refused(0, 1, 1)},
		{cost: 1, want: refused(0, 1, 1)},                // a ban in force is not replaced,
		{cost: int64(time.Hour), want: refused(0, 1, 1)}, // by a shorter ban or a longer
		{advance: 1, cost: 0, want: allowed(0, 0)},
		{cost: int64(time.Second), key: "other", want: allowed(0, time.Second)},
		{cost: 0, want: allowed(0, 0)},
	})
	bs, ok := s.(ratelimit.BatchStore)
	if !ok {
		return
	}
	p := policy("p", fivePerSecond)
	reqs := []ratelimit.BatchItem{{Policy: p, Key: "{other}", Cost: 1}, {Policy: ban, Key: "{other}"}}
	ban.Name, p.Name = "q/ban", "q" // keys of one slot on a Cluster: the tag is the key
	take(t, s, ban, "{other}", int64(time.Second))
	results := make([]ratelimit.Result, 2)
	err := bs.TakeAll(context.Background(), reqs, results)
	if errors.Is(err, errors.ErrUnsupported) {
		return
	}
	require.NoError(t, err)
	assert.False(t, results[1].Allowed, "the ban refuses the batch")
	assert.Equal(t, int64(10), take(t, s, p, "{other}", 0).Remaining, "the batch spent nothing")
}

// penalized is a policy of 1 request an hour whose key is banned for a
// minute on its third refusal within 10 s (strikes: 2, one back every 5 s).
var penalized = ratelimit.Policy{Name: "login", Limit: ratelimit.Per(1, time.Hour),
	Penalty: ratelimit.Penalty{After: 3, Within: 10 * time.Second, For: time.Minute}}

// refusal checks that a request of key is refused by the policies violated,
// and returns its RetryAfter.
func refusal(t *testing.T, l *ratelimit.Limiter, key string, violated ...string) time.Duration {
	t.Helper()
	res := limit(t, l, key, 1)
	require.False(t, res.Allowed, "Take(%q)", key)
	require.Equal(t, violated, refusers.Names(res, false), "Take(%q)", key)
	return res.RetryAfter
}

// testPenaltyBans: the third refusal in a row bans for exactly For, every
// request is refused until the nanosecond the ban ends, whatever the
// bucket holds, refusals during the ban count no strike, and other keys
// are not banned.
func testPenaltyBans(t *testing.T, c *Clock, s ratelimit.Store) {
	daily := ratelimit.Policy{Name: "daily", Limit: ratelimit.Per(100, 24*time.Hour)}
	l := limiter(t, s, penalized, daily)
	require.True(t, limit(t, l, "k", 1).Allowed)
	require.True(t, limit(t, l, "other", 1).Allowed)
	assert.Equal(t, time.Hour, refusal(t, l, "k", "login"))
	assert.Equal(t, time.Hour, refusal(t, l, "k", "login"))
	assert.Equal(t, time.Minute, refusal(t, l, "k", "login/ban"), "the third refusal bans")
	assert.Equal(t, time.Hour, refusal(t, l, "other", "login"), "other keys are not banned")
	c.Advance(time.Minute - 1)
	for range 5 {
		assert.Equal(t, time.Duration(1), refusal(t, l, "k", "login/ban"), "refused to the nanosecond")
	}
	assert.Equal(t, int64(99), limit(t, limiter(t, s, daily), "k", 0).Remaining, "refusals spend nothing elsewhere")
	c.Advance(1)
	assert.Equal(t, time.Hour-time.Minute, refusal(t, l, "k", "login"), "the ban is over: the bucket decides")
	assert.Equal(t, time.Hour-time.Minute, refusal(t, l, "k", "login"), "the refusals during the ban counted no strike")
	assert.Equal(t, time.Minute, refusal(t, l, "k", "login/ban"))

	// A bucket that would allow does not end a ban.
	c.Advance(2 * time.Hour)
	assert.Equal(t, int64(1), limit(t, l, "k", 0).Remaining, "a full bucket")
	one := limiter(t, s, ratelimit.Policy{Name: "login", Limit: ratelimit.Per(1, time.Hour),
		Penalty: ratelimit.Penalty{After: 1, For: time.Minute}})
	require.True(t, limit(t, one, "k", 1).Allowed)
	assert.Equal(t, time.Minute, refusal(t, one, "k", "login/ban"), "After: 1 bans at the first refusal")
	c.Advance(time.Hour)
	assert.Equal(t, int64(1), limit(t, one, "k", 0).Remaining)
}

// testPenaltyStrikesAge: strikes come back one every Within ÷ (After − 1):
// three refusals within 5 s ban, three within 5 s and a nanosecond do
// not, and neither do refusals spread over Within.
func testPenaltyStrikesAge(t *testing.T, c *Clock, s ratelimit.Store) {
	l := limiter(t, s, penalized)
	for _, key := range []string{"a", "b", "c"} {
		require.True(t, limit(t, l, key, 1).Allowed)
		refusal(t, l, key, "login")
		refusal(t, l, key, "login")
	}
	c.Advance(5*time.Second - 1)
	refusal(t, l, "a", "login/ban")
	c.Advance(1)
	refusal(t, l, "b", "login")
	c.Advance(10 * time.Second)
	refusal(t, l, "c", "login")
	refusal(t, l, "c", "login")
	refusal(t, l, "c", "login/ban")
}

// testPenaltyBackOff: with Max, a key banned again as soon as each ban
// ends is banned 1, 2, 4, then 5 minutes (the cap) and 5 again; after a
// long quiet spell, 1 minute again.
func testPenaltyBackOff(t *testing.T, c *Clock, s ratelimit.Store) {
	p := ratelimit.Policy{Name: "login", Limit: ratelimit.Per(1, 24*time.Hour),
		Penalty: ratelimit.Penalty{After: 2, Within: 10 * time.Second, For: time.Minute, Max: 5 * time.Minute}}
	l := limiter(t, s, p)
	require.True(t, limit(t, l, "k", 1).Allowed)
	var bans []time.Duration
	for range 6 {
		refusal(t, l, "k", "login")
		ban := refusal(t, l, "k", "login/ban")
		bans = append(bans, ban)
		c.Advance(ban)
	}
	assert.Equal(t, []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute}, bans)
	c.Advance(4 * 10 * time.Minute)
	refusal(t, l, "k", "login")
	assert.Equal(t, time.Minute, refusal(t, l, "k", "login/ban"), "every ban forgotten")
}

// testPenaltyReset: Limiter.Reset ends a ban and forgets the strikes.
func testPenaltyReset(t *testing.T, c *Clock, s ratelimit.Store) {
	resetStore(t, s)
	l := limiter(t, s, penalized)
	require.True(t, limit(t, l, "k", 1).Allowed)
	refusal(t, l, "k", "login")
	refusal(t, l, "k", "login")
	refusal(t, l, "k", "login/ban")
	require.NoError(t, l.Reset(context.Background(), "k"))
	require.True(t, limit(t, l, "k", 1).Allowed, "the ban is over")
	refusal(t, l, "k", "login")
	refusal(t, l, "k", "login")
	refusal(t, l, "k", "login/ban")
}
