package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
	"github.com/tokenfair/ratelimit/storetest"
)

// TestConformanceNoBatching runs the whole suite with every decision in a
// round trip of its own, on one Redis and on a Cluster.
func TestConformanceNoBatching(t *testing.T) {
	single := redistest.Start(t).Client()
	cluster, _ := redistest.StartCluster(t, 3)
	for name, client := range map[string]redis.Scripter{"single": single, "cluster": cluster} {
		t.Run(name, func(t *testing.T) {
			var n atomic.Int64
			storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
				return newStore(t, client, &redisstore.Options{NoBatching: true, Clock: now,
					Prefix:  fmt.Sprintf("test%d:", n.Add(1)),
					Timeout: 2 * time.Second}) // the deadline is tested elsewhere; these runs share 2 loaded cores
			})
		})
	}
}

// scriptCalls counts the keys a client's script calls decide (one per Take)
// and the round trips that carried them.
type scriptCalls struct{ calls, trips atomic.Int64 }

func (h *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			h.calls.Add(keys(cmd))
			h.trips.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var n int64
		for _, c := range cmds {
			if isScript(c) {
				n += keys(c)
			}
		}
		if n > 0 {
			h.calls.Add(n)
			h.trips.Add(1)
		}
		return next(ctx, cmds)
	}
}

func isScript(cmd redis.Cmder) bool { return cmd.Name() == "evalsha" || cmd.Name() == "eval" }

// keys returns the number of keys of a script call.
func keys(cmd redis.Cmder) int64 {
	n, _ := cmd.Args()[2].(int)
	return int64(n)
}

// hammer runs requests Takes of cost 1 on each of goroutines goroutines,
// over keys (in turn), and returns how many each key admitted and how many
// calls failed.
func hammer(s *redisstore.Store, p *ratelimit.Policy, keys []string, goroutines, requests int) (map[string]int64, int64) {
	var mu sync.Mutex
	admitted := map[string]int64{}
	var failed atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range requests {
				key := keys[(g*requests+i)%len(keys)]
				res, err := s.Take(context.Background(), p, key, 1)
				if err != nil {
					failed.Add(1)
					continue
				}
				if res.Allowed {
					mu.Lock()
					admitted[key]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return admitted, failed.Load()
}

// TestBatchingExactCount: 64 goroutines × 40 requests on one key with a
// burst of 1000, batched: exactly the burst is admitted, in fewer round
// trips than decisions.
func TestBatchingExactCount(t *testing.T) {
	client := redistest.Start(t).Client()
	h := new(scriptCalls)
	client.AddHook(h)
	// Every decision goes to Redis: the refusal cache would answer the
	// refusals after the burst.
	s := newStore(t, client, &redisstore.Options{Timeout: 5 * time.Second, NoRefusalCache: true})
	p := &ratelimit.Policy{Name: "hot", Limit: ratelimit.Per(1, time.Hour).WithBurst(1000)}
	admitted, failed := hammer(s, p, []string{"k"}, 64, 40)
	assert.Zero(t, failed)
	assert.Equal(t, int64(1000), admitted["k"], "64 goroutines × 40 requests against a burst of 1000")
	calls, trips := h.calls.Load(), h.trips.Load()
	assert.GreaterOrEqual(t, calls, int64(64*40))
	assert.Less(t, trips, calls, "some calls shared a round trip")
	t.Logf("%d script calls in %d round trips", calls, trips)
}

// TestBatchingSharded: on a Cluster and on a Ring, go-redis splits each
// pipeline by node; every key still admits exactly its burst, and the keys
// spread over every node.
func TestBatchingSharded(t *testing.T) {
	cluster, nodes := redistest.StartCluster(t, 3)
	a, b := redistest.Start(t), redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:                 map[string]string{"a": a.Addr, "b": b.Addr},
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	})
	t.Cleanup(func() { ring.Close() })
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		nodes  []*redistest.Server
	}{
		{"cluster", cluster, nodes},
		{"ring", ring, []*redistest.Server{a, b}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := new(scriptCalls)
			tc.client.AddHook(h)
			s := newStore(t, tc.client, &redisstore.Options{Timeout: 5 * time.Second})
			p := &ratelimit.Policy{Name: "burst5", Limit: ratelimit.Per(1, time.Hour).WithBurst(5)}
			var keys []string
			for i := range 100 {
				keys = append(keys, fmt.Sprint("user-", i))
			}
			admitted, failed := hammer(s, p, keys, 64, 20) // 1280 requests, 12.8 per key
			assert.Zero(t, failed)
			for _, k := range keys {
				assert.Equal(t, int64(5), admitted[k], "key %s", k)
			}
			calls, trips := h.calls.Load(), h.trips.Load()
			assert.Less(t, trips, calls, "some calls shared a round trip")
			t.Logf("%d script calls in %d round trips", calls, trips)
			for _, srv := range tc.nodes {
				n, err := srv.Client().DBSize(context.Background()).Result()
				require.NoError(t, err)
				assert.Greater(t, n, int64(10), "keys on every node (%s)", srv.Addr)
			}
		})
	}
}

// TestBatchingScriptFlush: SCRIPT FLUSH, again and again under load, costs
// no call an error and no key a token.
func TestBatchingScriptFlush(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.Client(), &redisstore.Options{Timeout: 5 * time.Second})
	other := srv.Client()
	p := &ratelimit.Policy{Name: "flush", Limit: ratelimit.Per(1, time.Hour).WithBurst(1000)}
	var (
		admitted atomic.Int64
		failed   atomic.Int64
		taken    atomic.Int64
	)
	// Ten rounds of 32 goroutines taking 5 tokens each; in each, the script
	// cache is flushed once 20 calls have been decided, while the rest are
	// in flight. (Rounds, not a flush every 20 calls, so that a loaded
	// machine that starves the flusher still flushes ten times.)
	midway := 0
	for round := range 10 {
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for range 5 {
					res, err := s.Take(context.Background(), p, "k", 1)
					taken.Add(1)
					switch {
					case err != nil:
						failed.Add(1)
					case res.Allowed:
						admitted.Add(1)
					}
				}
			})
		}
		end := int64(round+1) * 32 * 5
		for taken.Load() < end-32*5+20 {
			runtime.Gosched()
		}
		require.NoError(t, other.ScriptFlush(context.Background()).Err())
		if taken.Load() < end {
			midway++
		}
		wg.Wait()
	}
	assert.Zero(t, failed.Load())
	assert.Equal(t, int64(1000), admitted.Load())
	assert.Positive(t, midway, "some flushes came while calls were in flight")
}
