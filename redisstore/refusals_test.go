package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/refusers"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
	"github.com/tokenfair/ratelimit/storetest"
)

// commands returns the number of commands Redis has run (the scripts'
// own included).
func commands(t *testing.T, c *redis.Client) int64 { return redistest.Commands(t, c) }

// scripts returns the number of script calls Redis has run: one per
// decision or batch that reached it.
func scripts(t *testing.T, c *redis.Client) int64 { return redistest.Commands(t, c, "evalsha", "eval") }

// TestRefusalCache: once Redis's answer leaves a key without a token, the
// store refuses the key's requests locally, with exactly the refusal Redis
// gives (the clock is shared here, so the bound is exact), until the bound
// lets a token exist; then it asks Redis again.
func TestRefusalCache(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	c := new(storetest.Clock)
	cached := newStore(t, client, &redisstore.Options{Clock: c.Now})
	direct := newStore(t, client, &redisstore.Options{Clock: c.Now, NoRefusalCache: true})
	ctx := context.Background()
	for range 10 {
		res, err := cached.Take(ctx, policy, "k", 1)
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	before := commands(t, client)
	for range 5 {
		res, err := cached.Take(ctx, policy, "k", 1)
		require.NoError(t, err)
		assert.False(t, res.Allowed)
		assert.Same(t, policy, res.Policy)
		assert.Equal(t, 200*time.Millisecond, res.RetryAfter)
		assert.Equal(t, 2*time.Second, res.ResetAfter)
		assert.Zero(t, res.Remaining)
	}
	assert.Equal(t, before, commands(t, client), "refused without asking Redis")
	exact, err := direct.Take(ctx, policy, "k", 1)
	require.NoError(t, err)
	assert.False(t, exact.Allowed)
	assert.Equal(t, 200*time.Millisecond, exact.RetryAfter, "Redis's own refusal")

	c.Advance(200 * time.Millisecond) // one token
	res, err := cached.Take(ctx, policy, "k", 2)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "two tokens are not there yet")
	assert.Equal(t, 200*time.Millisecond, res.RetryAfter)
	res, err = cached.Take(ctx, policy, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "the token the bound lets exist is asked of Redis")
	assert.Greater(t, commands(t, client), before+1)

	res, err = cached.Take(ctx, policy, "other", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "another key is not refused")
}

// TestRefusalCacheRetryAfterIsNeverLater: when the cache's bound is below
// the bucket's state (another instance spent tokens since), its refusals
// say to retry no later than Redis would.
func TestRefusalCacheRetryAfterIsNeverLater(t *testing.T) {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	a := newStore(t, client, &redisstore.Options{Clock: c.Now})
	b := newStore(t, client, &redisstore.Options{Clock: c.Now, NoRefusalCache: true})
	ctx := context.Background()
	res, err := a.Take(ctx, policy, "k", 10)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	c.Advance(600 * time.Millisecond) // three tokens, which b spends
	res, err = b.Take(ctx, policy, "k", 3)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	res, err = a.Take(ctx, policy, "k", 4)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "4 > the 3 tokens a's bound allows")
	exact, err := b.Take(ctx, policy, "k", 4)
	require.NoError(t, err)
	require.False(t, exact.Allowed)
	assert.Less(t, res.RetryAfter, exact.RetryAfter)
	assert.Equal(t, 200*time.Millisecond, res.RetryAfter)
	assert.Equal(t, 800*time.Millisecond, exact.RetryAfter)
}

// TestRefusalCacheForgetsGiveBacks: tokens given back through the store
// are not refused by the bound from before.
func TestRefusalCacheForgetsGiveBacks(t *testing.T) {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	s := newStore(t, client, &redisstore.Options{Clock: c.Now})
	ctx := context.Background()
	took, err := s.Take(ctx, policy, "k", 10)
	require.NoError(t, err)
	res, err := s.Take(ctx, policy, "k", 1)
	require.NoError(t, err)
	require.False(t, res.Allowed)
	require.NoError(t, s.Refund(ctx, policy, "k", 1, took))
	res, err = s.Take(ctx, policy, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "the token given back")
}

// TestRefusalCacheBatch: a batch that the cache refuses in one of its
// requests is refused without Redis, and writes nothing.
func TestRefusalCacheBatch(t *testing.T) {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	s := newStore(t, client, &redisstore.Options{Clock: c.Now})
	ctx := context.Background()
	global := &ratelimit.Policy{Name: "global", Limit: ratelimit.PerSecond(100).WithBurst(100)}
	_, err := s.Take(ctx, policy, "k", 10)
	require.NoError(t, err)
	_, err = s.Take(ctx, policy, "k", 1) // refused: cached
	require.NoError(t, err)
	before := commands(t, client)
	reqs := []ratelimit.BatchItem{{Policy: policy, Key: "k", Cost: 1}, {Policy: global, Key: "*", Cost: 1}}
	results := make([]ratelimit.Result, 2)
	require.NoError(t, s.TakeAll(ctx, reqs, results))
	assert.False(t, results[0].Allowed)
	assert.Equal(t, 200*time.Millisecond, results[0].RetryAfter)
	assert.True(t, results[1].Allowed)
	assert.Equal(t, before, commands(t, client), "refused without asking Redis")
	res, err := s.Take(ctx, global, "*", 100)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "the refused batch spent nothing of the global bucket")
}

// TestRefusalCacheSkipsARefusedBatch: a batch that one policy refuses in
// Redis spends nothing from the others, so what their results would have
// left is not cached as their state: the next request, once the refusing
// bucket has a token again, is allowed, as it is without the cache.
func TestRefusalCacheSkipsARefusedBatch(t *testing.T) {
	for _, noCache := range []bool{true, false} {
		client := redistest.Start(t).Client()
		c := new(storetest.Clock)
		policies := []ratelimit.Policy{
			{Name: "a", Limit: ratelimit.Per(2, time.Minute)},
			{Name: "b", Limit: ratelimit.PerSecond(10).WithBurst(1)},
		}
		instance := func() *ratelimit.Limiter {
			lim, err := ratelimit.New(newStore(t, client, &redisstore.Options{Clock: c.Now, NoRefusalCache: noCache}), policies...)
			require.NoError(t, err)
			return lim
		}
		ctx := context.Background()
		res, err := instance().Take(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		second := instance()
		res, err = second.Take(ctx, "k", 1)
		require.NoError(t, err)
		require.Equal(t, []string{"b"}, refusers.Names(res, false), "b is empty; a would have been")
		c.Advance(100 * time.Millisecond) // b has a token again, a still one
		res, err = second.Take(ctx, "k", 1)
		require.NoError(t, err)
		assert.True(t, res.Allowed, "NoRefusalCache %v: refused by %v for %v", noCache, refusers.Names(res, false), res.RetryAfter)
	}
}

// TestNoRefusalCache: with the cache off, every refusal is Redis's.
func TestNoRefusalCache(t *testing.T) {
	client := redistest.Start(t).Client()
	s := newStore(t, client, &redisstore.Options{Clock: new(storetest.Clock).Now, NoRefusalCache: true})
	ctx := context.Background()
	_, err := s.Take(ctx, policy, "k", 10)
	require.NoError(t, err)
	before := scripts(t, client)
	for range 5 {
		res, err := s.Take(ctx, policy, "k", 1)
		require.NoError(t, err)
		require.False(t, res.Allowed)
	}
	assert.Equal(t, before+5, scripts(t, client))
}

// TestRefusalCacheDoesNotAllocate: a local refusal allocates nothing.
func TestRefusalCacheDoesNotAllocate(t *testing.T) {
	client := redistest.Start(t).Client()
	s := newStore(t, client, &redisstore.Options{Clock: new(storetest.Clock).Now})
	ctx := context.Background()
	_, err := s.Take(ctx, policy, "k", 10)
	require.NoError(t, err)
	_, err = s.Take(ctx, policy, "k", 1)
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(1000, func() {
		if res, _ := s.Take(ctx, policy, "k", 1); res.Allowed {
			t.Fatal("allowed")
		}
	})
	assert.Zero(t, allocs)
}

// TestInstancesNeverOverAdmit: three instances (clients and caches of their
// own) hammer hot and cold keys with mixed costs for a quarter of a second
// on the Redis server's clock; for every key, what they admitted together
// is at most what the exact bucket allows over the run (burst + rate ×
// elapsed, elapsed on Redis's clock), and most refusals never reach Redis.
func TestInstancesNeverOverAdmit(t *testing.T) {
	t.Run("cache", func(t *testing.T) { testInstancesNeverOverAdmit(t, 0) })
	t.Run("leases", func(t *testing.T) { testInstancesNeverOverAdmit(t, 20*time.Millisecond) })
}

func testInstancesNeverOverAdmit(t *testing.T, lease time.Duration) {
	srv := redistest.Start(t)
	admin := srv.Client()
	limit := &ratelimit.Policy{Name: "api", Limit: ratelimit.PerSecond(100).WithBurst(20)}
	const instances, workers, run = 3, 4, 250 * time.Millisecond
	keys := []string{"hot-0", "hot-1", "cold-0", "cold-1", "cold-2", "cold-3"}
	var stores []*redisstore.Store
	for range instances {
		stores = append(stores, newStore(t, srv.Client(), &redisstore.Options{Lease: lease}))
	}
	ctx := context.Background()
	start, err := admin.Time(ctx).Result()
	require.NoError(t, err)
	before := scripts(t, admin)
	var mu sync.Mutex
	admitted := map[string]int64{}
	requests, refused := 0, 0
	var wg sync.WaitGroup
	deadline := time.Now().Add(run)
	for i, s := range stores {
		for w := range workers {
			wg.Go(func() {
				for n := 0; time.Now().Before(deadline); n++ {
					key := keys[(n*7+w)%2] // mostly the hot keys
					if n%5 == 0 {
						key = keys[2+(n/5+i)%4]
					}
					cost := int64(1 + (n+w)%3)
					res, err := s.Take(ctx, limit, key, cost)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					requests++
					if res.Allowed {
						admitted[key] += cost
					} else {
						refused++
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	end, err := admin.Time(ctx).Result()
	require.NoError(t, err)
	asked := scripts(t, admin) - before
	elapsed := end.Sub(start)
	for _, key := range keys {
		allowed := limit.Limit.Burst() + int64(elapsed/limit.Limit.Interval())
		assert.LessOrEqual(t, admitted[key], allowed, "%s over %v", key, elapsed)
		t.Logf("%s: %d tokens admitted of at most %d over %v", key, admitted[key], allowed, elapsed)
	}
	t.Logf("%d requests, %d refused, %d reached Redis", requests, refused, asked)
	require.Positive(t, refused)
	assert.Less(t, asked, int64(requests)/10, "most refusals were local")
}

// TestDeniedFlood: one key refused to three instances costs Redis at most
// one command per hundred refused requests.
func TestDeniedFlood(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	const instances, requests = 3, 5000
	var stores []*redisstore.Store
	for range instances {
		stores = append(stores, newStore(t, srv.Client(), nil))
	}
	ctx := context.Background()
	res, err := stores[0].Take(ctx, policy, "flood", 10) // the bucket empty
	require.NoError(t, err)
	require.True(t, res.Allowed)
	before := commands(t, admin)
	var refused [instances]int
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			for range requests {
				res, err := s.Take(ctx, policy, "flood", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Allowed {
					refused[i]++
				}
			}
		})
	}
	wg.Wait()
	spent := commands(t, admin) - before
	total := refused[0] + refused[1] + refused[2]
	t.Logf("%d refused, %d Redis commands: %.4f per refusal", total, spent, float64(spent)/float64(total))
	require.Greater(t, total, instances*requests*9/10)
	assert.LessOrEqual(t, float64(spent)/float64(total), 0.01, fmt.Sprintf("%d commands for %d refusals", spent, total))
}

// TestRefusalCacheWhileRedisIsDown: a refusal the cache answers needs no
// Redis, so it is still given while Redis is down; everything else fails
// as before, for a failover to handle.
func TestRefusalCacheWhileRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	c := new(storetest.Clock)
	s := newStore(t, srv.Client(), &redisstore.Options{Clock: c.Now})
	ctx := context.Background()
	_, err := s.Take(ctx, policy, "k", 10)
	require.NoError(t, err)
	srv.Kill()
	res, err := s.Take(ctx, policy, "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.Equal(t, 200*time.Millisecond, res.RetryAfter)
	_, err = s.Take(ctx, policy, "other", 1)
	assert.Error(t, err, "a key the cache knows nothing of needs Redis")
	c.Advance(200 * time.Millisecond)
	_, err = s.Take(ctx, policy, "k", 1)
	assert.Error(t, err, "once a token may exist, Redis decides")
}
