package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/storeerr"
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

// TestServerClock decides on the Redis server's own time.
func TestServerClock(t *testing.T) {
	s := newStore(t, redistest.Start(t).Client(), nil)
	ctx := context.Background()
	for i := range 10 {
		res, err := s.Take(ctx, slow, "k", 1)
		require.NoError(t, err)
		require.True(t, res.Allowed, "request %d", i+1)
	}
	res, err := s.Take(ctx, slow, "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.InDelta(t, float64(10*time.Second), float64(res.RetryAfter), float64(time.Second))
}

// TestLongKeys: a 100 kB key (from a custom key function that forgot to
// hash it) is limited like any other, under a short Redis key name that does
// not hold it; in-flight slots too.
func TestLongKeys(t *testing.T) {
	client := redistest.Start(t).Client()
	s := newStore(t, client, &redisstore.Options{Prefix: "long:"})
	ctx := context.Background()
	long, other := strings.Repeat("s3cr3t", 100_000/6), strings.Repeat("s3cr3t", 100_000/6)+"!"
	for range 10 {
		res, err := s.Take(ctx, slow, long, 1)
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	res, err := s.Take(ctx, slow, long, 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "the long key's burst is spent")
	res, err = s.Take(ctx, slow, other, 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "a different long key has its own bucket")
	ok, err := s.Acquire(ctx, long, "t", 1, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)

	keys, err := client.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 3)
	for _, k := range keys {
		assert.Less(t, len(k), 100, "key name %.40q…", k)
		assert.NotContains(t, k, "s3cr3t")
	}
}

// TestKeysExpire: every key carries a TTL that ends when its bucket is full
// again, so Redis holds nothing that carries no information. Decided on
// the Redis server's clock, which also expires the keys.
func TestKeysExpire(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	s := newStore(t, client, &redisstore.Options{Prefix: "ttl:"})
	ctx := context.Background()
	shape := *slow
	shape.Name, shape.Algorithm = "queue", ratelimit.LeakyShape
	for i := range 50 {
		_, err := s.Take(ctx, slow, fmt.Sprint("client-", i), int64(1+i%10))
		require.NoError(t, err)
		_, err = s.Take(ctx, &shape, fmt.Sprint("client-", i), 1)
		require.NoError(t, err)
	}
	keys, err := client.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 100)
	for _, k := range keys {
		require.True(t, strings.HasPrefix(k, "ttl:api:client-") || strings.HasPrefix(k, "ttl:queue:client-"), k)
		ttl, err := client.PTTL(ctx, k).Result()
		require.NoError(t, err)
		assert.Positive(t, ttl, "key %s has a TTL", k)
		assert.LessOrEqual(t, ttl, 100*time.Second, "key %s lives at most until its bucket is full", k)
	}
	// A cost of 1 out of 10 is earned back in 10 s: the TTL says so.
	_, err = s.Take(ctx, slow, "one", 1)
	require.NoError(t, err)
	ttl, err := client.PTTL(ctx, "ttl:api:one").Result()
	require.NoError(t, err)
	assert.InDelta(t, float64(10*time.Second), float64(ttl), float64(time.Second))
}

// TestKeysOnClockOutliveTheirState: Redis expires keys on its own clock, so
// a key decided on Options.Clock, which may run behind it (a test's clock
// stands still while Redis's runs on), is kept 10 s longer than its state
// matters: it must not expire into a full bucket before Clock says so.
func TestKeysOnClockOutliveTheirState(t *testing.T) {
	client := redistest.Start(t).Client()
	clock := new(storetest.Clock)
	s := newStore(t, client, &redisstore.Options{Clock: clock.Now, Prefix: "ttl:"})
	ctx := context.Background()
	_, err := s.Take(ctx, policy, "one", 1) // full again in 200 ms on Clock
	require.NoError(t, err)
	ttl, err := client.PTTL(ctx, "ttl:api:one").Result()
	require.NoError(t, err)
	// (PTTL only falls as real time runs; without the 10 s it would be 200 ms.)
	assert.LessOrEqual(t, ttl, 10*time.Second+200*time.Millisecond)
	assert.Greater(t, ttl, 9*time.Second)
	ok, err := s.Acquire(ctx, "one", "t", 1, time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	ttl, err = client.PTTL(ctx, "ttl::inflight:one").Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, ttl, 11*time.Second)
	assert.Greater(t, ttl, 10*time.Second)
}

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

func TestClusterManyKeys(t *testing.T) {
	client, servers := redistest.StartCluster(t, 3)
	s := newStore(t, client, &redisstore.Options{Timeout: 5 * time.Second}) // the first calls discover the slots and dial
	ctx := context.Background()
	for i := range 300 {
		res, err := s.Take(ctx, slow, fmt.Sprint("user-", i), 10)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		res, err = s.Take(ctx, slow, fmt.Sprint("user-", i), 1)
		require.NoError(t, err)
		require.False(t, res.Allowed, "user-%d drained", i)
	}
	for _, srv := range servers {
		n, err := srv.Client().DBSize(ctx).Result()
		require.NoError(t, err)
		assert.Greater(t, n, int64(50), "keys spread over every node (%s)", srv.Addr)
	}

	// Several policies in one atomic step when the keys share a slot (a
	// hash tag); ErrNotAtomic, having done nothing, when they do not.
	daily := &ratelimit.Policy{Name: "daily", Limit: ratelimit.Per(3, 24*time.Hour)}
	results := make([]ratelimit.Result, 2)
	for i := range 3 {
		err := s.TakeAll(ctx, []ratelimit.BatchItem{{Policy: slow, Key: "{tenant-1}", Cost: 1}, {Policy: daily, Key: "{tenant-1}", Cost: 1}}, results)
		require.NoError(t, err)
		assert.True(t, results[0].Allowed && results[1].Allowed, "request %d", i+1)
	}
	err := s.TakeAll(ctx, []ratelimit.BatchItem{{Policy: slow, Key: "{tenant-1}", Cost: 1}, {Policy: daily, Key: "{tenant-1}", Cost: 1}}, results)
	require.NoError(t, err)
	assert.False(t, results[1].Allowed, "the daily quota is spent")
	res, err := s.Take(ctx, slow, "{tenant-1}", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(7), res.Remaining, "the refused batch spent nothing from the other policy")

	global := &ratelimit.Policy{Name: "global", Limit: ratelimit.PerSecond(100), Global: true}
	err = s.TakeAll(ctx, []ratelimit.BatchItem{{Policy: slow, Key: "user-1", Cost: 1}, {Policy: global, Key: "*", Cost: 1}}, results)
	assert.ErrorIs(t, err, ratelimit.ErrNotAtomic)
}

func TestPrefix(t *testing.T) {
	client := redistest.Start(t).Client()
	a := newStore(t, client, &redisstore.Options{Prefix: "app-a:"})
	b := newStore(t, client, &redisstore.Options{Prefix: "app-b:"})
	ctx := context.Background()
	_, err := a.Take(ctx, slow, "k", 10)
	require.NoError(t, err)
	res, err := b.Take(ctx, slow, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, int64(9), res.Remaining, "another prefix is another bucket")
	n, err := client.Exists(ctx, "app-a:api:k", "app-b:api:k").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(2), n)
}

// TestPausedServerCostsOneDeadline: a hung Redis (SIGSTOP) costs a call its
// deadline, not the client's read timeout, and the error names the
// deadline; a caller's own shorter deadline is not named as the store's.
func TestPausedServerCostsOneDeadline(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.Client(), &redisstore.Options{Timeout: 50 * time.Millisecond})
	ctx := context.Background()
	_, err := s.Take(ctx, policy, "k", 1)
	require.NoError(t, err)
	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	_, err = s.Take(ctx, policy, "k", 1)
	elapsed := time.Since(start)
	require.Error(t, err)
	assert.Less(t, elapsed, 50*time.Millisecond+slack, "the deadline, not the client's 3 s read timeout")
	assert.ErrorContains(t, err, "redisstore: no answer within Options.Timeout 50ms: ")
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	_, err = s.Take(short, policy, "k", 1)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "Options.Timeout", "the caller's deadline ended it")
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

// fakeScripter answers every script call with a fixed reply or error; it
// exercises the reply checks only.
type fakeScripter struct {
	redis.Scripter
	reply any
	err   error
}

func (f fakeScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	if f.err != nil {
		cmd.SetErr(f.err)
	} else {
		cmd.SetVal(f.reply)
	}
	return cmd
}

func (f fakeScripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return f.EvalSha(ctx, sha1, keys, args...)
}

func TestMalformedReplies(t *testing.T) {
	ok := []any{int64(1), int64(0), int64(200_000_000), int64(0), int64(0), int64(1_700_000_000), int64(0)} // allowed, ahead, credit, now
	for name, f := range map[string]fakeScripter{
		"error":        {err: errors.New("LOADING Redis is loading the dataset in memory")},
		"not an array": {reply: "OK"},
		"no group":     {reply: []any{}},
		"two groups":   {reply: []any{ok, ok}},
		"flat":         {reply: ok},
		"group error":  {reply: []any{errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")}},
		"group string": {reply: []any{"1"}},
		"short":        {reply: []any{[]any{int64(1), int64(0), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
		"not integers": {reply: []any{[]any{"1", int64(0), int64(0), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
		"bad flag":     {reply: []any{[]any{int64(7), int64(0), int64(0), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
		"disagreement": {reply: []any{[]any{int64(0), int64(0), int64(0), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
		"too long":     {reply: []any{[]any{int64(1), int64(0), int64(0), int64(0), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
		"negative":     {reply: []any{[]any{int64(1), int64(-1), int64(0), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
		"nanoseconds":  {reply: []any{[]any{int64(1), int64(0), int64(1_000_000_000), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
		"overflow":     {reply: []any{[]any{int64(0), int64(1 << 62), int64(0), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
		"nil":          {reply: nil},
		"bad now":      {reply: []any{[]any{int64(1), int64(0), int64(0), int64(0), int64(0), int64(-1), int64(0)}}},
		"bad credit":   {reply: []any{[]any{int64(1), int64(0), int64(0), int64(0), int64(1_000_000_000), int64(1_700_000_000), int64(0)}}},
		"nested":       {reply: []any{[]any{[]any{int64(1)}, int64(0), int64(0), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
	} {
		s := newStore(t, f, &redisstore.Options{SkipContextTimeoutCheck: true})
		res, err := s.Take(context.Background(), policy, "k", 1)
		assert.Error(t, err, name)
		assert.Equal(t, ratelimit.Result{}, res, name)
		// Only a group's own error concerns one key; the rest is the store's.
		assert.Equal(t, name == "group error", errors.Is(err, storeerr.ErrKeyState), "%s: a key's state: %v", name, err)
	}
	// The same fake with a well-formed reply: the checks above fail for
	// their reasons, not for all replies.
	s := newStore(t, fakeScripter{reply: []any{ok}}, &redisstore.Options{SkipContextTimeoutCheck: true})
	res, err := s.Take(context.Background(), policy, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, int64(8), res.Remaining, "one token was spent before, one now")
}
