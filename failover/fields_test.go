package failover_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/failover"
)

// fieldsServer is a handler behind a Middleware of format f over the
// policies 4/s burst 8 ("rate") and 100 a day ("daily"), deciding in the
// rig's Store, on the rig's clock.
func (rig *failoverRig) fieldsServer(t *testing.T, f ratelimit.HeaderFormat) (*server, *ratelimit.Limiter) {
	t.Helper()
	lim, err := ratelimit.New(rig.store,
		ratelimit.Policy{Name: "rate", Limit: ratelimit.PerSecond(4).WithBurst(8)},
		ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(100, time.UTC)})
	require.NoError(t, err)
	byClient := func(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }
	mw, err := ratelimit.NewMiddleware(lim, byClient, &ratelimit.MiddlewareOptions{Headers: f, Logger: discard, Clock: rig.clock.Now})
	require.NoError(t, err)
	return &server{t: t, mw: mw}, lim
}

// TestLocalFieldsAreTheShares: while the primary fails, a Middleware over a
// Store in Local mode for 2 instances answers with the header fields of
// this instance's share of each policy (2/s burst 4, 50 a day), in every
// format, so that a client paces itself by what it may really use; Open
// mode, which checks nothing, writes none.
func TestLocalFieldsAreTheShares(t *testing.T) {
	for _, tc := range []struct {
		format ratelimit.HeaderFormat
		want   [][2]string // of the first answers: field, value
	}{
		{ratelimit.HeadersIETF, [][2]string{
			{"RateLimit-Policy", `"rate";q=4;w=2,"daily";q=50;w=86400`},
			{"RateLimit", `"rate";r=3;t=1`}, // 3/4 left binds before 49/50
		}},
		{ratelimit.HeadersLegacy, [][2]string{{"RateLimit-Limit", "4"}, {"RateLimit-Remaining", "3"}, {"RateLimit-Reset", "1"}}},
		{ratelimit.HeadersX, [][2]string{{"X-RateLimit-Limit", "4"}, {"X-RateLimit-Remaining", "3"}, {"X-RateLimit-Reset", "1"}}},
	} {
		rig := newFailover(t, failover.Local, 2)
		s, _ := rig.fieldsServer(t, tc.format)
		rig.primary.down.Store(true)
		w := s.get("c")
		require.Equal(t, http.StatusOK, w.Code)
		for _, f := range tc.want {
			assert.Equal(t, f[1], field(w.Header(), f[0]), "%v: %s", tc.format, f[0])
		}

		rig = newFailover(t, failover.Open, 2)
		s, _ = rig.fieldsServer(t, tc.format)
		rig.primary.down.Store(true)
		w = s.get("c")
		require.Equal(t, http.StatusOK, w.Code)
		for _, f := range tc.want {
			assert.Empty(t, field(w.Header(), f[0]), "%v, open: no figures, no %s", tc.format, f[0])
		}
	}
}

// TestLocalFieldsRefusal: the Local share's refusal carries its figures
// and a Retry-After of the share's rate: 2/s, so 500 ms.
func TestLocalFieldsRefusal(t *testing.T) {
	rig := newFailover(t, failover.Local, 2)
	s, _ := rig.fieldsServer(t, ratelimit.HeadersIETF)
	rig.primary.down.Store(true)
	var got []string
	for range 5 {
		w := s.get("c")
		got = append(got, field(w.Header(), "RateLimit"))
		assert.Equal(t, `"rate";q=4;w=2,"daily";q=50;w=86400`, field(w.Header(), "RateLimit-Policy"))
	}
	assert.Equal(t, []string{`"rate";r=3;t=1`, `"rate";r=2;t=1`, `"rate";r=1;t=1`, `"rate";r=0;t=1`, `"rate";r=0;t=1`}, got)
	w := s.get("c")
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Equal(t, int64(4), int64(s.calls), "the share's burst of 4")

	rig.clock.Advance(500 * time.Millisecond)
	w = s.get("c")
	assert.Equal(t, http.StatusOK, w.Code, "a token of the share every 500 ms")
	assert.Equal(t, `"rate";r=0;t=1`, field(w.Header(), "RateLimit"))
}

// TestLocalResultIsTheLimiters: a Result decided locally, under shares of
// a Limiter's policies, is that Limiter's: Charge charges the shares (no
// error naming another Limiter), Refund gives nothing back.
func TestLocalResultIsTheLimiters(t *testing.T) {
	ctx := context.Background()
	rig := newFailover(t, failover.Local, 2)
	_, lim := rig.fieldsServer(t, ratelimit.HeadersIETF)
	rig.primary.down.Store(true)
	took, err := lim.Take(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, took.Allowed)
	require.True(t, took.Degraded)
	require.True(t, took.Local)
	require.Len(t, took.Results, 2)
	assert.Equal(t, int64(3), took.Results[0].Remaining, "rate: 4 − 1")
	assert.Equal(t, int64(49), took.Results[1].Remaining, "daily: 50 − 1")

	require.NoError(t, lim.Refund(ctx, "k", 1, took))
	require.NoError(t, lim.Settle(ctx, "k", "requests", 1, 3, took))
	res, err := lim.Take(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1), res.Results[0].Remaining, "rate: 4 − 1 − 2, nothing given back")
	assert.Equal(t, int64(47), res.Results[1].Remaining, "daily: 50 − 1 − 2")
}
