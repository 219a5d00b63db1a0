package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
	"github.com/tokenfair/ratelimit/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newStore returns a store on c with opts, whose Timeout is 2 s unless a
// test sets its own: only the tests of the deadline need the default 100 ms,
// and the tests share two loaded cores.
func newStore(t *testing.T, c redis.Scripter, opts *redisstore.Options) *redisstore.Store {
	t.Helper()
	var o redisstore.Options
	if opts != nil {
		o = *opts
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	opts = &o
	s, err := redisstore.New(c, opts)
	require.NoError(t, err)
	return s
}

// TestConformance runs the whole suite against one Redis, each test with a
// prefix of its own, the script fed the suite's clock.
func TestConformance(t *testing.T) {
	client := redistest.Start(t).Client()
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		return newStore(t, client, &redisstore.Options{Clock: now, Prefix: fmt.Sprintf("test%d:", n.Add(1)),
			Timeout: 2 * time.Second}) // the deadline is tested elsewhere; these runs share 2 loaded cores
	})
}

// TestConformanceWaitReplicas runs the whole suite, the randomized model
// included, against a primary whose every decision waits for its replica
// (Options.WaitReplicas): the wait changes no decision.
func TestConformanceWaitReplicas(t *testing.T) {
	primary, _ := startReplicated(t)
	client := primary.Client()
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		return newStore(t, client, &redisstore.Options{Clock: now, Prefix: fmt.Sprintf("test%d:", n.Add(1)),
			Timeout: 2 * time.Second, WaitReplicas: 1})
	})
}

func TestConformanceCluster(t *testing.T) {
	client, _ := redistest.StartCluster(t, 3)
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		return newStore(t, client, &redisstore.Options{Clock: now, Prefix: fmt.Sprintf("test%d:", n.Add(1)),
			Timeout: 2 * time.Second}) // the deadline is tested elsewhere; these runs share 2 loaded cores
	})
}

var policy = &ratelimit.Policy{Name: "api", Limit: ratelimit.PerSecond(5).WithBurst(10)}

// slow is policy at a token every 10 s, for the tests on the Redis server's
// clock: it runs on while they do, and on a loaded machine a test can take
// far longer than policy's 200 ms a token.
var slow = &ratelimit.Policy{Name: "api", Limit: ratelimit.Per(6, time.Minute).WithBurst(10)}

// TestInstancesShareOneQuota: four stores with clients of their own, 8
// goroutines each, hammer one key: exactly the burst is admitted.
func TestInstancesShareOneQuota(t *testing.T) {
	srv := redistest.Start(t)
	p := &ratelimit.Policy{Name: "shared", Limit: ratelimit.Per(1, time.Hour).WithBurst(200)}
	var admitted, failed atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		s := newStore(t, srv.Client(), &redisstore.Options{Timeout: 5 * time.Second})
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 25 {
					res, err := s.Take(context.Background(), p, "hot", 1)
					if err != nil {
						failed.Add(1)
						continue
					}
					if res.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	assert.Zero(t, failed.Load())
	assert.Equal(t, int64(200), admitted.Load(), "4 instances × 8 goroutines × 25 requests against a burst of 200")
}

func TestNewChecksContextTimeout(t *testing.T) {
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer plain.Close()
	_, err := redisstore.New(plain, nil)
	assert.ErrorContains(t, err, "ContextTimeoutEnabled")
	_, err = redisstore.New(plain, &redisstore.Options{SkipContextTimeoutCheck: true})
	assert.NoError(t, err)
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cluster.Close()
	_, err = redisstore.New(cluster, &redisstore.Options{})
	assert.ErrorContains(t, err, "*redis.ClusterClient")
	_, err = redisstore.New(nil, nil)
	assert.Error(t, err)
	_, err = redisstore.New(plain, &redisstore.Options{SkipContextTimeoutCheck: true, Timeout: -time.Second})
	assert.ErrorContains(t, err, "Options.Timeout -1s")
}

// TestNewDefaults: a nil *Options and a zero Options are the documented
// defaults: the prefix "ratelimit:" and the Redis server's clock.
func TestNewDefaults(t *testing.T) {
	client := redistest.Start(t).Client()
	ctx := context.Background()
	for i, opts := range []*redisstore.Options{nil, {}} {
		s, err := redisstore.New(client, opts)
		require.NoError(t, err)
		res, err := s.Take(ctx, policy, fmt.Sprint("k", i), 1)
		require.NoError(t, err)
		assert.True(t, res.Allowed)
		assert.Equal(t, int64(9), res.Remaining)
		n, err := client.Exists(ctx, fmt.Sprint("ratelimit:api:k", i)).Result()
		require.NoError(t, err)
		assert.Equal(t, int64(1), n, "the default prefix")
	}
}
