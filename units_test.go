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
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/storetest"
)

// meters returns a limiter of three units on a memory store whose clock
// does not move: 10 requests, 100 tokens and 1000 bytes a minute.
func meters(t *testing.T) *ratelimit.Limiter {
	t.Helper()
	store, err := memorystore.New(&memorystore.Options{Clock: new(storetest.Clock).Now})
	require.NoError(t, err)
	lim, err := ratelimit.New(store,
		ratelimit.Policy{Name: "calls", Limit: ratelimit.Per(10, time.Minute)},
		ratelimit.Policy{Name: "tokens", Limit: ratelimit.Per(100, time.Minute), Unit: "tokens"},
		ratelimit.Policy{Name: "bytes", Limit: ratelimit.Per(1000, time.Minute), Unit: "content-bytes"})
	require.NoError(t, err)
	return lim
}

// TakeUnits spends each policy's cost in its unit, all or nothing; a unit
// without a cost spends 1.
func TestTakeUnits(t *testing.T) {
	ctx := context.Background()
	lim := meters(t)
	res, err := lim.TakeUnits(ctx, "k", map[string]int64{"tokens": 60})
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, []int64{9, 40, 999}, remaining(t, lim, "k"))

	res, err = lim.TakeUnits(ctx, "k", map[string]int64{"tokens": 41, "content-bytes": 5})
	require.NoError(t, err)
	assert.False(t, res.Allowed, "41 tokens of 40")
	assert.Equal(t, "tokens", res.Policy.Name)
	assert.Equal(t, []int64{9, 40, 999}, remaining(t, lim, "k"), "refused by one unit: nothing spent in any")

	_, err = lim.TakeUnits(ctx, "k", map[string]int64{"credits": 1})
	assert.EqualError(t, err, `ratelimit: TakeUnits: no policy counts the unit "credits" (the units: ["requests" "tokens" "content-bytes"])`)
	_, err = lim.TakeUnits(ctx, "k", map[string]int64{"tokens": -1})
	assert.ErrorIs(t, err, ratelimit.ErrBadRequest)
	_, err = lim.TakeUnits(ctx, "k", map[string]int64{"tokens": 101})
	assert.ErrorIs(t, err, ratelimit.ErrBadRequest, "above the burst of tokens")
	assert.Equal(t, []int64{9, 40, 999}, remaining(t, lim, "k"))
}

// Settle sets one unit's cost: the others keep what they reserved.
func TestSettleOneUnit(t *testing.T) {
	ctx := context.Background()
	lim := meters(t)
	took, err := lim.TakeUnits(ctx, "k", map[string]int64{"requests": 5, "tokens": 60})
	require.NoError(t, err)
	require.True(t, took.Allowed)
	require.NoError(t, lim.Settle(ctx, "k", "tokens", 60, 25, took))
	assert.Equal(t, []int64{5, 75, 999}, remaining(t, lim, "k"), "35 tokens back, nothing else")
	require.NoError(t, lim.Settle(ctx, "k", "content-bytes", 1, 301, took))
	assert.Equal(t, []int64{5, 75, 699}, remaining(t, lim, "k"), "300 more bytes")
	require.NoError(t, lim.Settle(ctx, "k", "requests", 5, 0, took))
	assert.Equal(t, []int64{9, 75, 699}, remaining(t, lim, "k"), "a cost of 0 settles at 1")

	assert.EqualError(t, lim.Settle(ctx, "k", "credits", 1, 1, took), `ratelimit: Settle: no policy counts the unit "credits" (the units: ["requests" "tokens" "content-bytes"])`)
	assert.EqualError(t, lim.Settle(ctx, "k", "tokens", 60, -1, took), "ratelimit: Settle: negative cost -1 of tokens")
}

// The binding policy of an admitted request has the least left relative to
// its quota, whatever its unit; the first of equals.
func TestBindingByShare(t *testing.T) {
	ctx := context.Background()
	lim := meters(t)
	res, err := lim.TakeUnits(ctx, "a", map[string]int64{"tokens": 10})
	require.NoError(t, err)
	assert.Equal(t, "calls", res.Policy.Name, "9/10 = 90/100, the first of equals, before 999/1000")
	res, err = lim.TakeUnits(ctx, "b", map[string]int64{"tokens": 11})
	require.NoError(t, err)
	assert.Equal(t, "tokens", res.Policy.Name, "89/100 < 9/10")
	res, err = lim.TakeUnits(ctx, "c", map[string]int64{"content-bytes": 200})
	require.NoError(t, err)
	assert.Equal(t, "bytes", res.Policy.Name, "800/1000 < 9/10, though 800 > 9")
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

func TestCostsChecked(t *testing.T) {
	lim := meters(t)
	for _, tc := range []struct {
		costs map[string]func(*http.Request) (int64, error)
		err   string
	}{
		{map[string]func(*http.Request) (int64, error){"requests": nil}, `ratelimit: MiddlewareOptions.Costs["requests"]: the cost of requests is MiddlewareOptions.Cost`},
		{map[string]func(*http.Request) (int64, error){"Tokens": nil}, `ratelimit: MiddlewareOptions.Costs: unit "Tokens": want 1 to 64 characters from [a-z0-9._-], starting with a letter`},
		{map[string]func(*http.Request) (int64, error){"tokens": nil}, `ratelimit: MiddlewareOptions.Costs["tokens"]: nil function`},
	} {
		_, err := ratelimit.NewMiddleware(lim, ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{Costs: tc.costs})
		assert.EqualError(t, err, tc.err)
	}
	_, err := ratelimit.New(new(memorystore.Store), ratelimit.Policy{Limit: ratelimit.PerSecond(1), Unit: "Bytes"})
	assert.EqualError(t, err, `ratelimit: policy "default": unit "Bytes": want 1 to 64 characters from [a-z0-9._-], starting with a letter`)
}

// On a store that cannot decide the policies together (a Redis Cluster
// with a global policy), a refusal by one unit gives back what each other
// policy took, in its own unit: nothing is spent in any.
func TestTakeUnitsOneAtATime(t *testing.T) {
	ctx := context.Background()
	store, err := memorystore.New(&memorystore.Options{Clock: new(storetest.Clock).Now})
	require.NoError(t, err)
	na := &notAtomicStore{Store: store}
	lim, err := ratelimit.New(na,
		ratelimit.Policy{Name: "calls", Limit: ratelimit.Per(10, time.Minute)},
		ratelimit.Policy{Name: "bytes", Limit: ratelimit.Per(1000, time.Minute), Unit: "content-bytes"},
		ratelimit.Policy{Name: "tokens", Limit: ratelimit.Per(100, time.Minute), Unit: "tokens"})
	require.NoError(t, err)
	res, err := lim.TakeUnits(ctx, "k", map[string]int64{"content-bytes": 400, "tokens": 60})
	require.NoError(t, err)
	require.True(t, res.Allowed)
	res, err = lim.TakeUnits(ctx, "k", map[string]int64{"requests": 3, "content-bytes": 500, "tokens": 41})
	require.NoError(t, err)
	assert.False(t, res.Allowed, "41 tokens of 40")
	assert.Equal(t, []int64{9, 600, 40}, remaining(t, lim, "k"), "the 3 requests and 500 bytes taken before the refusal went back")
	assert.Positive(t, na.batches.Load(), "TakeAll was asked, and said errors.ErrUnsupported")
}

// BenchmarkTakeUnits is one decision of three policies: of one unit (Take,
// the same cost to each), and of three (TakeUnits, a cost for each).
func BenchmarkTakeUnits(b *testing.B) {
	store, err := memorystore.New(nil)
	require.NoError(b, err)
	ctx := context.Background()
	run := func(b *testing.B, units [3]string, take func(*ratelimit.Limiter) (ratelimit.Result, error)) {
		lim, err := ratelimit.New(store,
			ratelimit.Policy{Name: "a" + units[0], Limit: benchLimit, Unit: units[0]},
			ratelimit.Policy{Name: "b" + units[1], Limit: benchLimit, Unit: units[1]},
			ratelimit.Policy{Name: "c" + units[2], Limit: benchLimit, Unit: units[2]})
		require.NoError(b, err)
		b.ReportAllocs()
		allowed := 0
		for b.Loop() {
			if res, _ := take(lim); res.Allowed {
				allowed++
			}
		}
		if allowed != b.N {
			b.Fatalf("allowed %d of %d", allowed, b.N)
		}
	}
	b.Run("one-unit", func(b *testing.B) {
		run(b, [3]string{"requests", "requests", "requests"}, func(l *ratelimit.Limiter) (ratelimit.Result, error) { return l.Take(ctx, "k", 1) })
	})
	b.Run("three-units", func(b *testing.B) {
		run(b, [3]string{"requests", "tokens", "content-bytes"}, func(l *ratelimit.Limiter) (ratelimit.Result, error) {
			return l.TakeUnits(ctx, "k", map[string]int64{"tokens": 700, "content-bytes": 1})
		})
	})
}
