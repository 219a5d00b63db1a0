package ratelimit_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

// settling is a harness whose handler settles each request at the cost in
// its X-Settle field (none without it), and keeps Settle's error.
func settling(t *testing.T, limit ratelimit.Limit, opts *ratelimit.MiddlewareOptions) (*harness, *error) {
	var err error
	h := newHarness(t, setup{limit: limit, opts: opts, next: func(w http.ResponseWriter, r *http.Request) {
		err = nil
		if v := r.Header.Get("X-Settle"); v != "" {
			cost, _ := strconv.ParseInt(v, 10, 64)
			err = ratelimit.Settle(r.Context(), "requests", cost)
		}
		w.Write([]byte("ok"))
	}})
	return h, &err
}

// look returns what key's bucket holds under h's one policy, and how long
// until a request of 1 is allowed.
func (h *harness) look(key string) (remaining int64, retryAfter time.Duration) {
	h.t.Helper()
	res, err := h.lim.Take(context.Background(), key, 0)
	require.NoError(h.t, err)
	return res.Remaining, res.RetryAfter
}

func TestSettleGivesBackTheDifference(t *testing.T) {
	h, err := settling(t, ratelimit.PerSecond(10), &ratelimit.MiddlewareOptions{ResultInContext: true, Cost: costByHeader})
	require.Equal(t, http.StatusOK, h.get("a", "X-Cost", "5", "X-Settle", "2").Code)
	require.NoError(t, *err)
	left, _ := h.look("a")
	assert.Equal(t, int64(8), left, "reserved 5, settled 2")
}

func TestSettleMoreGoesIntoDebt(t *testing.T) {
	h, err := settling(t, ratelimit.PerSecond(10), &ratelimit.MiddlewareOptions{ResultInContext: true})
	require.Equal(t, http.StatusOK, h.get("a", "X-Settle", "15").Code)
	require.NoError(t, *err)
	left, _ := h.look("a")
	assert.Equal(t, int64(0), left)
	w := h.get("a")
	require.Equal(t, http.StatusTooManyRequests, w.Code, "5 tokens in debt")
	assert.Equal(t, "1", w.Header().Get("Retry-After"), "the debt of 5 and the next token: 600 ms")
	res, _ := h.lim.Take(context.Background(), "a", 1)
	assert.Equal(t, 600*time.Millisecond, res.RetryAfter)
	h.clock.Advance(600 * time.Millisecond)
	assert.Equal(t, http.StatusOK, h.get("a").Code, "repaid")
}

// A settled cost is charged in full: the key waits what it spent, and
// Retry-After says so; a cost of 0 settles at 1.
func TestSettleIsExact(t *testing.T) {
	h, err := settling(t, ratelimit.PerSecond(10), &ratelimit.MiddlewareOptions{ResultInContext: true})
	require.Equal(t, http.StatusOK, h.get("a", "X-Settle", "1000000").Code)
	require.NoError(t, *err)
	res, _ := h.lim.Take(context.Background(), "a", 1)
	assert.Equal(t, 99999100*time.Millisecond, res.RetryAfter, "10⁶ tokens at 100 ms, and the next token, less the burst's 1 s")
	w := h.get("a")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "100000", w.Header().Get("Retry-After"))

	for range 10 {
		require.Equal(t, http.StatusOK, h.get("b", "X-Settle", "0").Code)
		require.NoError(t, *err)
	}
	assert.Equal(t, http.StatusTooManyRequests, h.get("b", "X-Settle", "0").Code, "ten requests settled at 0 cost 1 each")
}

func TestSettleErrors(t *testing.T) {
	h, err := settling(t, ratelimit.PerSecond(10), &ratelimit.MiddlewareOptions{ResultInContext: true})
	h.get("a", "X-Settle", "-1")
	assert.EqualError(t, *err, "ratelimit: Settle: negative cost -1 of requests")
	left, _ := h.look("a")
	assert.Equal(t, int64(9), left, "a refused settlement changes nothing")

	var ctx context.Context
	h = newHarness(t, setup{limit: ratelimit.PerSecond(10), opts: &ratelimit.MiddlewareOptions{ResultInContext: true},
		next: func(w http.ResponseWriter, r *http.Request) {
			ctx = r.Context()
			require.NoError(t, ratelimit.Settle(ctx, "requests", 3))
			assert.EqualError(t, ratelimit.Settle(ctx, "requests", 1), "ratelimit: Settle(\"requests\", 1): the request's cost in requests is settled already")
		}})
	h.get("a")
	left, _ = h.look("a")
	assert.Equal(t, int64(7), left, "the first settlement holds")
	assert.EqualError(t, ratelimit.Settle(ctx, "requests", 1), "ratelimit: Settle(\"requests\", 1): the response is complete")

	h = newHarness(t, setup{limit: ratelimit.PerSecond(10), opts: &ratelimit.MiddlewareOptions{ResultInContext: true},
		next: func(w http.ResponseWriter, r *http.Request) { ctx = r.Context() }})
	h.get("a")
	assert.EqualError(t, ratelimit.Settle(ctx, "requests", 5), "ratelimit: Settle(\"requests\", 5): the response is complete")
	left, _ = h.look("a")
	assert.Equal(t, int64(9), left, "nothing settled after the response")

	assert.EqualError(t, ratelimit.Settle(context.Background(), "requests", 1), "ratelimit: Settle: no decision in the context; set MiddlewareOptions.ResultInContext")
}

// A handler's settlement comes before the response's: CountIf settles only
// the units the handler did not, and the response settles content-bytes.
func TestSettleBeforeTheResponse(t *testing.T) {
	var err, bytesErr, unknownErr error
	h := newHarness(t, setup{policies: []ratelimit.Policy{
		{Name: "calls", Limit: ratelimit.Per(100, time.Minute)},
		{Name: "bytes", Limit: ratelimit.Per(100, time.Minute), Unit: "content-bytes"},
		{Name: "tokens", Limit: ratelimit.Per(100, time.Minute), Unit: "tokens"},
	}, opts: &ratelimit.MiddlewareOptions{ResultInContext: true, CountIf: func(status int) bool { return status < 400 },
		Costs: map[string]func(*http.Request) (int64, error){"tokens": func(*http.Request) (int64, error) { return 20, nil }}},
		next: func(w http.ResponseWriter, r *http.Request) {
			bytesErr = ratelimit.Settle(r.Context(), "content-bytes", 1)
			unknownErr = ratelimit.Settle(r.Context(), "credits", 1)
			err = ratelimit.Settle(r.Context(), "tokens", 7)
			if err == nil {
				err = ratelimit.Settle(r.Context(), "requests", 10)
			}
			if r.Header.Get("X-Fail") != "" {
				w.WriteHeader(http.StatusBadGateway)
			}
			w.Write([]byte("ok"))
		}})
	h.get("a")
	require.NoError(t, err)
	assert.EqualError(t, bytesErr, `ratelimit: Settle("content-bytes", 1): the response settles its bytes`)
	assert.EqualError(t, unknownErr, `ratelimit: Settle: no policy of the request counts the unit "credits" (its units: ["requests" "content-bytes" "tokens"])`)
	assert.Equal(t, map[string]int64{"calls": 90, "bytes": 98, "tokens": 93}, h.lookAll("a"),
		"the handler's 10 requests and 7 tokens, the 2 bytes of the body")
	h.get("a", "X-Fail", "1")
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"calls": 80, "bytes": 96, "tokens": 86}, h.lookAll("a"),
		"a 502 does not count, yet the units its handler settled stay, and its 2 bytes were sent")
}

// lookAll returns what key's bucket holds under each of h's policies.
func (h *harness) lookAll(key string) map[string]int64 {
	h.t.Helper()
	res, err := h.lim.Take(context.Background(), key, 0)
	require.NoError(h.t, err)
	left := map[string]int64{}
	for _, r := range res.Results {
		left[r.Policy.Name] = r.Remaining
	}
	return left
}

// Bytes sent are charged whatever CountIf says of the status.
func TestCountBytesOfAStatusThatDoesNotCount(t *testing.T) {
	h := newHarness(t, setup{policies: []ratelimit.Policy{{Limit: ratelimit.Per(100, time.Minute), Unit: "content-bytes"}},
		opts: &ratelimit.MiddlewareOptions{CountIf: func(status int) bool { return status < 400 }},
		next: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte("not found"))
		}})
	h.get("a")
	left, _ := h.look("a")
	assert.Equal(t, int64(91), left, "a 404 that does not count is charged the 9 bytes it sent")
}

// TestCountBytesOverTenMinutes: at 1 000 bytes a minute (a burst of 1 000),
// responses of 10 000 bytes, one asked for every 100 ms for 10 minutes:
// each is charged in full, so the key is served what an exact bucket
// allows, 20 000 bytes (the first response, and the one the bucket admits
// once it has earned back the 9 000 bytes of debt and one), never the
// 100 000 a debt bounded at one burst let through.
func TestCountBytesOverTenMinutes(t *testing.T) {
	body := make([]byte, 10_000)
	h := newHarness(t, setup{policies: []ratelimit.Policy{{Limit: ratelimit.Per(1000, time.Minute), Unit: "content-bytes"}},
		next: func(w http.ResponseWriter, r *http.Request) { w.Write(body) }})
	served := 0
	for range 6000 {
		if w := h.get("a"); w.Code == http.StatusOK {
			served += w.Body.Len()
		}
		h.clock.Advance(100 * time.Millisecond)
	}
	assert.Equal(t, 20_000, served)
	assert.LessOrEqual(t, served, 10*1000+1000+10_000, "the exact bucket's bound: the rate, the burst and the response that crosses it")
}

// One Middleware writes every policy with its unit, reserves each unit's
// cost, and names the binding one; a refusal's Retry-After is the longest
// wait of the refusing policies.
func TestMiddlewareUnits(t *testing.T) {
	lim := meters(t)
	h := newHarness(t, setup{limiter: lim, opts: &ratelimit.MiddlewareOptions{
		Costs: map[string]func(*http.Request) (int64, error){"tokens": func(r *http.Request) (int64, error) {
			return strconv.ParseInt(r.Header.Get("X-Tokens"), 10, 64)
		}},
	}})
	w := h.get("a", "X-Tokens", "30")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"calls";q=10;w=60,"tokens";q=100;qu="tokens";w=60,"bytes";q=1000;qu="content-bytes";w=60`, field(w.Header(), "RateLimit-Policy"))
	assert.Equal(t, `"tokens";r=70;t=1`, field(w.Header(), "RateLimit"))
	assert.Equal(t, []int64{9, 70, 998}, remaining(t, lim, "a"), "1 request, 30 tokens, and the 2 bytes of the body")

	w = h.get("a", "X-Tokens", "0")
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Contains(t, w.Body.String(), "the request's cost in tokens, 0, is below 1")
	w = h.get("a", "X-Tokens", "x")
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Contains(t, w.Body.String(), "the cost in tokens function failed")

	w = h.get("a", "X-Tokens", "80")
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, `"tokens";r=70;t=6`, field(w.Header(), "RateLimit"), "10 tokens come back in 6 s")
	assert.Equal(t, "6", w.Header().Get("Retry-After"))
	assert.Equal(t, []int64{9, 70, 998}, remaining(t, lim, "a"), "nothing spent")
}
