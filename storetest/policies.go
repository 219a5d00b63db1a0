package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/refusers"
)

var global = ratelimit.Policy{Name: "global", Limit: ratelimit.PerSecond(1).WithBurst(4), Global: true}

// testGlobalCapacity: three clients, three requests each, under a global
// burst of 4 and generous per-client quotas: exactly 4 pass in all.
func testGlobalCapacity(t *testing.T, c *Clock, s ratelimit.Store) {
	l := limiter(t, s, ratelimit.Policy{Name: "per-client", Limit: fivePerSecond}, global)
	admitted := 0
	for _, client := range []string{"a", "b", "c"} {
		for range 3 {
			res := limit(t, l, client, 1)
			if res.Allowed {
				admitted++
				continue
			}
			assert.Equal(t, []string{"global"}, refusers.Names(res, false))
			assert.Equal(t, "global", res.Policy.Name, "the refusing policy binds")
			assert.Equal(t, time.Second, res.RetryAfter)
			require.Len(t, res.Results, 2)
			assert.True(t, res.Results[0].Allowed, "the per-client policy would have allowed it")
		}
	}
	assert.Equal(t, 4, admitted)
}

// testRefusedByGlobal: a client refused by the global policy keeps its own
// tokens, as a later request proves.
func testRefusedByGlobal(t *testing.T, c *Clock, s ratelimit.Store) {
	perClient := ratelimit.Policy{Name: "per-client", Limit: ratelimit.Per(2, time.Hour)}
	g := ratelimit.Policy{Name: "global", Limit: ratelimit.PerSecond(1), Global: true}
	l := limiter(t, s, perClient, g)
	require.True(t, limit(t, l, "a", 1).Allowed)
	for range 3 {
		res := limit(t, l, "b", 1)
		require.False(t, res.Allowed)
		assert.Equal(t, []string{"global"}, refusers.Names(res, false))
	}
	c.Advance(time.Second)
	res := limit(t, l, "b", 1)
	require.True(t, res.Allowed)
	assert.Equal(t, int64(1), res.Results[0].Remaining, "b's own bucket lost nothing to the refusals")
	c.Advance(time.Second)
	res = limit(t, l, "b", 1)
	require.True(t, res.Allowed)
	assert.Equal(t, int64(0), res.Results[0].Remaining)
	c.Advance(time.Second)
	res = limit(t, l, "b", 1)
	assert.Equal(t, []string{"per-client"}, refusers.Names(res, false), "now b's own quota is spent")
}

// testBatchNoMoment: a BatchStore's TakeAll that one request refuses
// spends nothing from the others at any moment: a goroutine looking at a
// global bucket while batches run that an empty per-client bucket refuses
// never sees the global one spent. (A TakeAll that takes each request and
// gives back on a refusal shows the spend.) Skipped for a store that is no
// BatchStore, or whose TakeAll answers errors.ErrUnsupported.
func testBatchNoMoment(t *testing.T, c *Clock, s ratelimit.Store) {
	bs, ok := s.(ratelimit.BatchStore)
	if !ok {
		t.Skip("not a ratelimit.BatchStore")
	}
	l := limiter(t, s, ratelimit.Policy{Name: "global", Limit: ratelimit.PerSecond(1).WithBurst(1000), Global: true},
		ratelimit.Policy{Name: "per-client", Limit: ratelimit.Per(1, time.Hour)})
	global, perClient := &l.Policies()[0], &l.Policies()[1]
	ctx := context.Background()
	require.True(t, take(t, s, perClient, "c", 1).Allowed)
	batch := []ratelimit.BatchItem{{Policy: global, Key: "*", Cost: 1}, {Policy: perClient, Key: "c", Cost: 1}}
	if err := bs.TakeAll(ctx, batch, make([]ratelimit.Result, 2)); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("TakeAll answers errors.ErrUnsupported")
	}
	const batchers, each = 4, 1000
	var finished atomic.Int64
	least := int64(1000)
	race(t, batchers+1, func(g int) error {
		if g == batchers { // the looker, until every batcher is done
			for finished.Load() < batchers {
				res, err := s.Take(ctx, global, "*", 0)
				if err != nil {
					return fmt.Errorf("Take(global): %w", err)
				}
				least = min(least, res.Remaining)
			}
			return nil
		}
		defer finished.Add(1)
		results := make([]ratelimit.Result, 2)
		for range each {
			if err := bs.TakeAll(ctx, batch, results); err != nil {
				return fmt.Errorf("TakeAll: %w", err)
			}
			if results[1].Allowed {
				return errors.New("TakeAll: the empty per-client bucket allowed a request")
			}
		}
		return nil
	})
	assert.Equal(t, int64(1000), least, "the global bucket, seen while refused batches ran")
}

// testMultiWindow: 5/s burst 10 and 15 a day; the result reports the
// policy closest to exhaustion, and a refusal the policy that refused.
func testMultiWindow(t *testing.T, c *Clock, s ratelimit.Store) {
	l := limiter(t, s, ratelimit.Policy{Name: "burst", Limit: fivePerSecond}, ratelimit.Policy{Name: "daily", Limit: ratelimit.Per(15, 24*time.Hour)})
	res := limit(t, l, "k", 1)
	assert.Equal(t, "burst", res.Policy.Name, "9 left of the burst, 14 of the day")
	assert.Equal(t, int64(9), res.Remaining)
	for range 9 {
		limit(t, l, "k", 1)
	}
	c.Advance(2 * time.Second)
	res = limit(t, l, "k", 1)
	assert.Equal(t, "daily", res.Policy.Name, "9 left of the burst, 4 of the day")
	assert.Equal(t, int64(4), res.Remaining)
	for range 4 {
		require.True(t, limit(t, l, "k", 1).Allowed)
	}
	res = limit(t, l, "k", 1)
	assert.False(t, res.Allowed)
	assert.Equal(t, []string{"daily"}, refusers.Names(res, false))
	assert.Equal(t, 24*time.Hour/15-2*time.Second, res.RetryAfter)
}

// testDryRun: a dry-run policy decides and counts but never refuses.
func testDryRun(t *testing.T, c *Clock, s ratelimit.Store) {
	shadow := ratelimit.Policy{Name: "shadow", Limit: ratelimit.Per(2, time.Minute), DryRun: true}
	l := limiter(t, s, ratelimit.Policy{Name: "enforced", Limit: fivePerSecond}, shadow)
	var dry [][]string
	for range 5 {
		res := limit(t, l, "k", 1)
		require.True(t, res.Allowed)
		assert.Empty(t, refusers.Names(res, false))
		assert.Equal(t, "enforced", res.Policy.Name, "dry-run policies never bind")
		dry = append(dry, refusers.Names(res, true))
	}
	assert.Equal(t, [][]string{nil, nil, {"shadow"}, {"shadow"}, {"shadow"}}, dry)
	for range 5 {
		limit(t, l, "k", 1)
	}
	res := limit(t, l, "k", 1)
	assert.Equal(t, []string{"enforced"}, refusers.Names(res, false))
	assert.Equal(t, []string{"shadow"}, refusers.Names(res, true))
}

// testPoliciesConcurrent: in each of several rounds, goroutines released
// at once on mixed keys under per-client (5 an hour) and global (200 a
// second) policies admit at most 5 per client and exactly 200 in all, and
// no per-client token is lost to global refusals: once the global bucket
// refills, each client gets exactly what it has left.
func testPoliciesConcurrent(t *testing.T, c *Clock, s ratelimit.Store) {
	g := ratelimit.Policy{Name: "global", Limit: ratelimit.PerSecond(200), Global: true}
	l := limiter(t, s, ratelimit.Policy{Name: "per-client", Limit: ratelimit.Per(5, time.Hour)}, g)
	for round := range 4 {
		policiesConcurrentRound(t, c, l, fmt.Sprintf("round-%d-client-", round))
	}
}

func policiesConcurrentRound(t *testing.T, c *Clock, l *ratelimit.Limiter, prefix string) {
	const clients, goroutines, global = 60, 6, 200
	counts := make([]atomic.Int64, clients)
	race(t, goroutines, func(g int) error {
		for i := range clients * 3 {
			k := (i*7 + g) % clients
			res, err := l.Take(context.Background(), prefix+strconv.Itoa(k), 1)
			if err != nil {
				return fmt.Errorf("Take(%s%d): %w", prefix, k, err)
			}
			if res.Allowed {
				counts[k].Add(1)
			}
		}
		return nil
	})
	total := int64(0)
	for k := range counts {
		require.LessOrEqual(t, counts[k].Load(), int64(5), "%s%d", prefix, k)
		total += counts[k].Load()
	}
	require.Equal(t, int64(global), total, "the global capacity is spent exactly")
	c.Advance(time.Second)
	total = 0
	for k := range counts {
		left := limit(t, l, prefix+strconv.Itoa(k), 0).Results[0].Remaining
		assert.Equal(t, 5-counts[k].Load(), left, "%s%d's tokens", prefix, k)
		total += left
	}
	assert.Equal(t, int64(clients*5-global), total)
}
