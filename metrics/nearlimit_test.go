package metrics_test

import (
	"log/slog"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/failover"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/metrics"
	"github.com/tokenfair/ratelimit/storetest"
)

// nearCount returns ratelimit_near_limit_total{policy}, from the
// registry's exposition, or 0 when it has no such series.
func nearCount(t *testing.T, reg *prometheus.Registry, policy string) int {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "ratelimit_near_limit_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if l := m.GetLabel(); len(l) == 1 && l[0].GetValue() == policy {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

// TestNearLimitSteps: with a burst of 10 and the default fraction, 0.2,
// the decisions that leave 1 and 0 tokens are near the limit; those that
// leave 9 to 2, and the refusal after them, are not.
func TestNearLimitSteps(t *testing.T) {
	r := newRig(t, nil, ratelimit.Policy{Name: "api", Limit: ratelimit.Per(10, time.Minute)})
	step := func(i, wantStatus, wantNear int) {
		t.Helper()
		if got := r.get("a"); got != wantStatus {
			t.Fatalf("request %d: status %d, want %d", i, got, wantStatus)
		}
		if got := nearCount(t, r.reg, "api"); got != wantNear {
			t.Errorf("request %d: ratelimit_near_limit_total{policy=%q} = %d, want %d", i, "api", got, wantNear)
		}
	}
	for i, want := range []int{0, 0, 0, 0, 0, 0, 0, 0, 1, 2} { // 9 to 0 tokens left
		step(i+1, http.StatusOK, want)
	}
	step(11, http.StatusTooManyRequests, 2)
	err := testutil.GatherAndCompare(r.reg, strings.NewReader(`
# HELP ratelimit_near_limit_total Allowed rate-limit decisions that left fewer tokens than the near-limit fraction of the policy's burst, by policy.
# TYPE ratelimit_near_limit_total counter
ratelimit_near_limit_total{policy="api"} 2
`), "ratelimit_near_limit_total")
	assert.NoError(t, err)
}

// TestNearLimitFractions: a key spends its whole burst, one token a
// request; the decisions counted are those that left fewer than fraction ×
// burst tokens, computed exactly (in float64, 0.07 × 100 is
// 7.000000000000001, which would count the decision that leaves 7).
func TestNearLimitFractions(t *testing.T) {
	for _, tc := range []struct {
		fraction float64 // 0: the default
		burst    int64
		want     int
	}{
		{0, 10, 2},
		{0.2, 10, 2},
		{0.25, 10, 3},
		{0.5, 10, 5},
		{1, 10, 10},
		{0.01, 10, 1}, // 0 < 0.1: only the last
		{0.07, 100, 7},
		{0.28, 25, 7},
		{0.55, 100, 55},
		{1e-20, 10, 1},
		{0.2, 1, 1},
	} {
		r := newRig(t, nil, ratelimit.Policy{Limit: ratelimit.Per(tc.burst, time.Minute)})
		if tc.fraction != 0 {
			require.NoError(t, r.m.SetNearLimit(tc.fraction))
		}
		for range tc.burst + 1 {
			r.get("a")
		}
		require.Equal(t, int(tc.burst), r.count("default", metrics.Allowed))
		assert.Equal(t, tc.want, nearCount(t, r.reg, "default"), "fraction %v, burst %d", tc.fraction, tc.burst)
	}
}

// TestNearLimitPerPolicy: each policy is judged on its own tokens and
// burst. A dry-run policy counts while it would allow; no policy counts
// for a request that another refused.
func TestNearLimitPerPolicy(t *testing.T) {
	perKey := ratelimit.Policy{Name: "per-key", Limit: ratelimit.Per(10, time.Minute)}              // near: 1 or 0 left
	global := ratelimit.Policy{Name: "global", Limit: ratelimit.Per(15, time.Minute), Global: true} // near: 2, 1 or 0 left
	shadow := ratelimit.Policy{Name: "shadow", Limit: ratelimit.Per(3, time.Minute), DryRun: true}  // near: 0 left
	r := newRig(t, nil, perKey, global, shadow)
	for range 8 {
		r.get("a") // per-key 9..2 left, global 14..7, shadow 2, 1, 0 (near), then would refuse
	}
	for range 5 {
		r.get("b") // per-key 9..5, global 6..2 (the last near), shadow 2, 1, 0 (near), then would refuse
	}
	assert.Equal(t, http.StatusOK, r.get("a"), "per-key 1 left, global 1: both near")
	assert.Equal(t, http.StatusOK, r.get("a"), "per-key 0 left, global 0: both near")
	assert.Equal(t, http.StatusTooManyRequests, r.get("a"), "refused: not counted")
	assert.Equal(t, http.StatusTooManyRequests, r.get("b"), "refused by global: per-key is not counted")
	err := testutil.GatherAndCompare(r.reg, strings.NewReader(`
# HELP ratelimit_near_limit_total Allowed rate-limit decisions that left fewer tokens than the near-limit fraction of the policy's burst, by policy.
# TYPE ratelimit_near_limit_total counter
ratelimit_near_limit_total{policy="global"} 3
ratelimit_near_limit_total{policy="per-key"} 2
ratelimit_near_limit_total{policy="shadow"} 2
`), "ratelimit_near_limit_total")
	assert.NoError(t, err)
	assert.Equal(t, 11, r.count("shadow", metrics.DryRunLimited), "a 8 times, b 3: counted there, not as near the limit")
}

// TestNearLimitNotWhenDegraded: a failover store's decisions while its
// primary fails are fallbacks (Open) or local (Local), never near the
// limit.
func TestNearLimitNotWhenDegraded(t *testing.T) {
	for mode, outcome := range map[failover.Mode]string{failover.Open: metrics.Fallback, failover.Local: metrics.Local} {
		local, err := memorystore.New(&memorystore.Options{Clock: new(storetest.Clock).Now})
		require.NoError(t, err)
		fo, err := failover.New(downStore{}, &failover.Options{Mode: mode, Local: local, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		r := newRigWith(t, fo, nil, []ratelimit.Policy{{Limit: ratelimit.Per(2, time.Minute)}}, &ratelimit.MiddlewareOptions{Logger: slog.New(slog.DiscardHandler)})
		for range 3 {
			r.get("a")
		}
		assert.Equal(t, 0, testutil.CollectAndCount(r.reg, "ratelimit_near_limit_total"), "%v", mode)
		assert.Positive(t, r.count("default", outcome), "%v", mode)
	}
}

// TestSetNearLimitRejects: a fraction outside (0, 1] is an error that
// names it, and the fraction in force stays.
func TestSetNearLimitRejects(t *testing.T) {
	r := newRig(t, nil, ratelimit.Policy{Limit: ratelimit.Per(10, time.Minute)})
	require.NoError(t, r.m.SetNearLimit(0.5))
	for _, tc := range []struct {
		fraction float64
		text     string
	}{{0, "0"}, {-0.2, "-0.2"}, {1.5, "1.5"}, {math.NaN(), "NaN"}, {math.Inf(1), "+Inf"}} {
		err := r.m.SetNearLimit(tc.fraction)
		require.Error(t, err, "SetNearLimit(%s)", tc.text)
		assert.Equal(t, "metrics: SetNearLimit("+tc.text+"): the fraction of the burst must be in (0, 1]", err.Error())
	}
	for range 10 {
		r.get("a")
	}
	assert.Equal(t, 5, nearCount(t, r.reg, "default"), "still 0.5: 4 to 0 tokens left")
}
