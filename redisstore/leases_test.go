package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
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

// TestLeaseGrowsAndGivesBack follows one key's leases on one instance: a
// key seen once takes its cost; seen again it takes 2 tokens, then twice
// as many each time a lease is spent, up to an eighth of the burst; every
// result is the exact one; what is left of a lease that ended goes back
// to the bucket with the key's next decision.
func TestLeaseGrowsAndGivesBack(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client()
	c := new(storetest.Clock)
	const lease = 50 * time.Millisecond
	leased := newStore(t, client, &redisstore.Options{Clock: c.Now, Lease: lease})
	direct := newStore(t, client, &redisstore.Options{Clock: c.Now, NoRefusalCache: true})
	p := &ratelimit.Policy{Name: "api", Limit: ratelimit.PerSecond(1).WithBurst(80)} // leases of 10 at most
	ctx := context.Background()

	// remaining is what the bucket has for another instance, which sees
	// the tokens leased as taken.
	remaining := func() int64 {
		t.Helper()
		res, err := direct.Take(ctx, p, "k", 0)
		require.NoError(t, err)
		return res.Remaining
	}
	spent := int64(0)
	// take makes n requests and checks that reached Redis times of them.
	take := func(n int, reached int64) {
		t.Helper()
		before := scripts(t, client)
		for range n {
			res, err := leased.Take(ctx, p, "k", 1)
			require.NoError(t, err)
			require.True(t, res.Allowed)
			spent++
			require.Equal(t, 80-spent, res.Remaining, "the exact result")
			require.Equal(t, p, res.Policy)
		}
		require.Equal(t, reached, scripts(t, client)-before, "script calls for %d requests", n)
	}
	assert.Equal(t, int64(80), remaining()) // and Redis has the script
	take(1, 1)                              // seen once: its cost, no lease
	assert.Equal(t, int64(79), remaining())
	take(2, 1) // a lease of 2
	take(4, 1) // of 4
	take(8, 1) // of 8
	take(10, 1)
	take(10, 1) // at most 80 / 8
	take(3, 1)  // a lease of 10, 7 left
	assert.Equal(t, 80-spent-7, remaining(), "the 7 tokens leased and left are out of the bucket")

	// A lease that ends goes back with the key's next request: the tokens
	// left return to the bucket, and the next lease is the size of what was
	// spent of the last (4).
	c.Advance(lease / 2)
	take(1, 0) // from the lease: 6 left
	c.Advance(lease/2 + time.Millisecond)
	before := scripts(t, client)
	res, err := leased.Take(ctx, p, "k", 1)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	spent++
	assert.Equal(t, int64(1), scripts(t, client)-before, "the give-back travels with the decision")
	assert.Equal(t, 80-spent-3, remaining(), "6 tokens back, a lease of 4 taken (one spent)")

	// A key that goes quiet for longer than a lease starts over: its cost.
	// What was left of its lease (3) comes back too late to be given back:
	// the script no longer keeps its room, so it is lost.
	c.Advance(10 * lease)
	before = scripts(t, client)
	res, err = leased.Take(ctx, p, "k", 1)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	spent++
	assert.Equal(t, int64(1), scripts(t, client)-before)
	assert.Equal(t, 80-spent-3, res.Remaining)
	assert.Equal(t, 80-spent-3, remaining(), "3 tokens lost, no lease taken")
}

// TestLeaseNeverOutlivesItsEnd: a lease's tokens are not spent at or
// after its end, even when tokens are left.
func TestLeaseNeverOutlivesItsEnd(t *testing.T) {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	const lease = 20 * time.Millisecond
	s := newStore(t, client, &redisstore.Options{Clock: c.Now, Lease: lease})
	p := &ratelimit.Policy{Limit: ratelimit.PerSecond(1).WithBurst(80)}
	ctx := context.Background()
	for range 3 { // plain, then a lease of 2 with 1 left
		_, err := s.Take(ctx, p, "k", 1)
		require.NoError(t, err)
	}
	_, err := s.Take(ctx, p, "k", 1) // a lease of 4, 3 left
	require.NoError(t, err)
	c.Advance(lease - 1)
	before := scripts(t, client)
	_, err = s.Take(ctx, p, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, int64(0), scripts(t, client)-before, "a nanosecond before its end, the lease spends")
	c.Advance(1)
	_, err = s.Take(ctx, p, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, int64(1), scripts(t, client)-before, "at its end it does not")
}

// TestLeaseShapingNeverLeases: a LeakyShape policy's queue is kept in
// Redis, in order; every decision goes there.
func TestLeaseShapingNeverLeases(t *testing.T) {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	s := newStore(t, client, &redisstore.Options{Clock: c.Now, Lease: 50 * time.Millisecond})
	p := &ratelimit.Policy{Limit: ratelimit.PerSecond(100).WithBurst(50), Algorithm: ratelimit.LeakyShape}
	_, err := s.Take(context.Background(), p, "warm-up", 0) // loads the script
	require.NoError(t, err)
	before := scripts(t, client)
	for i := range 20 {
		res, err := s.Take(context.Background(), p, "k", 1)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		assert.Equal(t, time.Duration(i)*10*time.Millisecond, res.Delay, "request %d's place in the queue", i)
	}
	assert.Equal(t, int64(20), scripts(t, client)-before)
}

// TestLeasesNeverOverAdmit: three instances with leases hammer hot and
// cold keys with mixed costs while the shared clock moves in steps, and
// every key's admitted requests, in the order of the times they were
// admitted, are a sequence that one exact bucket admits whole: no
// instance spends a leased token after the bucket would have run out,
// in any window. Run on one Redis and on a Cluster, and without leases.
func TestLeasesNeverOverAdmit(t *testing.T) {
	const lease = 40 * time.Millisecond
	t.Run("server", func(t *testing.T) {
		testLeasesNeverOverAdmit(t, lease, func() redis.Scripter { return redistest.Start(t).Client() })
	})
	t.Run("cluster", func(t *testing.T) {
		testLeasesNeverOverAdmit(t, lease, func() redis.Scripter {
			client, _ := redistest.StartCluster(t, 3)
			return client
		})
	})
	t.Run("server/no-leases", func(t *testing.T) {
		testLeasesNeverOverAdmit(t, 0, func() redis.Scripter { return redistest.Start(t).Client() })
	})
}

// An admission is a request admitted at a time, for the exact model.
type admission struct {
	at   int64
	cost int64
}

// requireExact checks that one exact bucket under p admits every
// admission of seq, in the order of their times.
func requireExact(t *testing.T, bucket string, p *ratelimit.Policy, seq []admission) {
	t.Helper()
	slices.SortStableFunc(seq, func(a, b admission) int { return int(a.at - b.at) })
	state := int64(0)
	for i, a := range seq {
		res, next := p.Decide(state, a.at, a.cost)
		require.True(t, res.Allowed, "%s: admission %d of %d (cost %d at %v) is more than the exact bucket allows", bucket, i, len(seq), a.cost, time.Duration(a.at))
		state = next
	}
}

func testLeasesNeverOverAdmit(t *testing.T, lease time.Duration, start func() redis.Scripter) {
	client := start()
	c := new(storetest.Clock)
	p := &ratelimit.Policy{Name: "api", Limit: ratelimit.PerSecond(400).WithBurst(64)}
	keys := []string{"hot-0", "hot-1", "cold-0", "cold-1", "cold-2", "cold-3", "cold-4", "cold-5"}
	var stores []*redisstore.Store
	for i := range 3 {
		stores = append(stores, newStore(t, client, &redisstore.Options{Clock: c.Now, Lease: lease, NoRefusalCache: i == 2}))
	}
	ctx := context.Background()
	var mu sync.Mutex
	admitted := map[string][]admission{}
	requests, leased := 0, 0
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		now := c.Now().UnixNano()
		var wg sync.WaitGroup
		for i, s := range stores {
			for w := range 2 {
				seed := rng.Uint64()
				wg.Go(func() {
					r := rand.New(rand.NewPCG(seed, uint64(i*2+w)))
					for range 12 {
						key := keys[r.IntN(2)]
						if r.IntN(4) == 0 {
							key = keys[2+r.IntN(len(keys)-2)]
						}
						cost := int64(1 + r.IntN(3))
						res, err := s.Take(ctx, p, key, cost)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						requests++
						if res.Allowed {
							admitted[key] = append(admitted[key], admission{now, cost})
						}
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		c.Advance(time.Duration(1+rng.IntN(30)) * time.Millisecond)
		_ = round
	}
	for _, key := range keys {
		seq := admitted[key]
		requireExact(t, key, p, seq)
		leased += len(seq)
	}
	t.Logf("%d requests, %d admitted", requests, leased)
	assert.Greater(t, leased, requests/4, "the test is a hammering, not a flood")
}

// TestLeasesSteadyLoadNothingRefused: the bound the documentation promises
// on under-admission. Below the rate, with fewer than 8 instances, leases
// refuse nothing: the leases held apart never leave a request without its
// tokens. And most decisions never reach Redis.
func TestLeasesSteadyLoadNothingRefused(t *testing.T) {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	p := &ratelimit.Policy{Limit: ratelimit.PerSecond(1000).WithBurst(100)}
	var stores []*redisstore.Store
	for range 3 {
		stores = append(stores, newStore(t, client, &redisstore.Options{Clock: c.Now, Lease: 50 * time.Millisecond}))
	}
	ctx := context.Background()
	before := scripts(t, client)
	requests := 0
	// Each instance sends one request every 4 ms (250/s; 750/s in all, on
	// a rate of 1 000/s), at instants that differ from one instance to the
	// next, for 4 s.
	for ms := range 4000 {
		s := stores[ms%4%3]
		if ms%4 == 3 {
			c.Advance(time.Millisecond)
			continue
		}
		res, err := s.Take(ctx, p, "k", 1)
		require.NoError(t, err)
		require.True(t, res.Allowed, "request at %d ms refused", ms)
		requests++
		c.Advance(time.Millisecond)
	}
	reached := scripts(t, client) - before
	t.Logf("%d requests, %d reached Redis", requests, reached)
	assert.Less(t, reached, int64(requests)/5)
}

// TestLeaseOptions: a lease must be whole milliseconds, up to a minute.
func TestLeaseOptions(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer client.Close()
	for _, d := range []time.Duration{-time.Millisecond, 1500 * time.Microsecond, 2 * time.Minute} {
		_, err := redisstore.New(client, &redisstore.Options{Lease: d})
		require.Error(t, err, "%v", d)
		assert.Contains(t, err.Error(), fmt.Sprintf("Options.Lease %v", d))
	}
	_, err := redisstore.New(client, &redisstore.Options{Lease: time.Minute})
	assert.NoError(t, err)
}

// TestLeaseRoomFreed: a spent lease frees its room when the next lease is
// taken, so that the bucket refills as the exact one does: only the live
// lease's room is kept.
func TestLeaseRoomFreed(t *testing.T) {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	leased := newStore(t, client, &redisstore.Options{Clock: c.Now, Lease: time.Minute})
	direct := newStore(t, client, &redisstore.Options{Clock: c.Now, NoRefusalCache: true})
	p := &ratelimit.Policy{Limit: ratelimit.PerSecond(100).WithBurst(80)} // leases of 10 at most
	ctx := context.Background()
	for range 60 { // 1 alone, then leases of 2, 4, 8, 10, 10, 10, 10 and 10: 5 left
		res, err := leased.Take(ctx, p, "k", 1)
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	c.Advance(200 * time.Millisecond) // 20 tokens back
	res, err := direct.Take(ctx, p, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(80-60-5+20), res.Remaining, "only the live lease's 5 tokens are out")
}

// TestLeaseEndBeatsRefusalCache: a lease that ends with a token left goes
// back with the key's next request, which that token then pays for, as the
// exact bucket's would; the refusal cache, which counted the whole lease as
// spent when it was taken, does not refuse it first.
func TestLeaseEndBeatsRefusalCache(t *testing.T) {
	const lease = 100 * time.Millisecond
	for _, noCache := range []bool{true, false} {
		c := new(storetest.Clock)
		s := newStore(t, redistest.Start(t).Client(), &redisstore.Options{Clock: c.Now, Lease: lease, NoRefusalCache: noCache})
		p := &ratelimit.Policy{Limit: ratelimit.Per(17, time.Minute)} // leases of 2 at most
		ctx := context.Background()
		for i := range 16 { // 1 alone, then leases of 2: the last one has a token left
			res, err := s.Take(ctx, p, "k", 1)
			require.NoError(t, err)
			require.True(t, res.Allowed, "request %d", i+1)
		}
		c.Advance(lease) // the lease ends; the bucket earns nothing in 100 ms
		res, err := s.Take(ctx, p, "k", 1)
		require.NoError(t, err)
		assert.True(t, res.Allowed, "NoRefusalCache %v: the 17th token (refused for %v)", noCache, res.RetryAfter)
		assert.Equal(t, int64(0), res.Remaining)
		res, err = s.Take(ctx, p, "k", 1)
		require.NoError(t, err)
		assert.False(t, res.Allowed, "NoRefusalCache %v: 17 of 17 spent", noCache)
	}
}

// TestLeasesSeveralPolicies: two limiters of a per-client policy and a
// global one, over stores with leases, take each policy from its lease
// (the global bucket, every client's, leases most): every bucket's
// admissions, the global one's included, replay whole through the exact
// bucket, and the same requests reach Redis far less often than without
// leases. The load stays below the global rate, then rushes past it, so
// that the global limit binds.
func TestLeasesSeveralPolicies(t *testing.T) {
	with := leaseSeveralPolicies(t, 40*time.Millisecond)
	without := leaseSeveralPolicies(t, 0)
	t.Logf("script calls: %d with leases, %d without", with, without)
	// Half on a quiet machine (1 809 of 3 551 on a loaded one); without
	// leases, or with leases that never pay, as many.
	assert.Less(t, with, without*3/4, "far fewer round trips with leases")
}

// leaseSeveralPolicies runs TestLeasesSeveralPolicies's load with the
// given lease time, checks it, and returns the script calls it made.
func leaseSeveralPolicies(t *testing.T, lease time.Duration) int64 {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	perKey := ratelimit.Policy{Name: "per-key", Limit: ratelimit.PerSecond(300).WithBurst(48)}
	global := ratelimit.Policy{Name: "global", Limit: ratelimit.PerSecond(1000).WithBurst(160), Global: true}
	var limiters []*ratelimit.Limiter
	for range 2 {
		l, err := ratelimit.New(newStore(t, client, &redisstore.Options{Clock: c.Now, Lease: lease}), perKey, global)
		require.NoError(t, err)
		limiters = append(limiters, l)
	}
	ctx := context.Background()
	_, err := limiters[0].Take(ctx, "warm-up", 0)
	require.NoError(t, err)
	before := scripts(t, client)
	var mu sync.Mutex
	admitted := map[string][]admission{} // by bucket: "global", or the key
	requests, refused := 0, 0
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		now := c.Now().UnixNano()
		var wg sync.WaitGroup
		for i, l := range limiters {
			seed := rng.Uint64()
			wg.Go(func() {
				r := rand.New(rand.NewPCG(seed, uint64(i)))
				for range 10 {
					key := fmt.Sprintf("client-%d", r.IntN(4))
					res, err := l.Take(ctx, key, 1)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					requests++
					if res.Allowed {
						admitted[key] = append(admitted[key], admission{now, 1})
						admitted["global"] = append(admitted["global"], admission{now, 1})
					} else {
						refused++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		step := 14 + rng.IntN(14) // 20 requests in 20.5 ms on average: below the global rate
		if round >= 160 {
			step = 1 + rng.IntN(8) // a rush, that the global limit cuts
		}
		c.Advance(time.Duration(step) * time.Millisecond)
	}
	for bucket, seq := range admitted {
		p := &perKey
		if bucket == "global" {
			p = &global
		}
		requireExact(t, bucket, p, seq)
	}
	calls := scripts(t, client) - before
	t.Logf("lease %v: %d requests, %d refused, %d script calls", lease, requests, refused, calls)
	assert.Positive(t, refused, "the global limit binds")
	return calls
}

// TestLeaseRefundStaysLocal: tokens given back (a response that does not
// count, a refusal by another policy) that a lease paid for go back into
// that lease without a round trip while it lasts, and are lost once it has
// been replaced; tokens the bucket paid for go back to Redis. A look at
// the bucket (cost 0) is the lease's too.
func TestLeaseRefundStaysLocal(t *testing.T) {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	s := newStore(t, client, &redisstore.Options{Clock: c.Now, Lease: time.Minute})
	p := &ratelimit.Policy{Limit: ratelimit.PerSecond(1).WithBurst(80)}
	ctx := context.Background()
	take := func(cost, remaining int64) ratelimit.Result {
		t.Helper()
		res, err := s.Take(ctx, p, "k", cost)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		assert.Equal(t, remaining, res.Remaining, "Take(%d)", cost)
		return res
	}
	refund := func(took ratelimit.Result) {
		t.Helper()
		require.NoError(t, s.Refund(ctx, p, "k", 1, took))
	}
	alone := take(1, 79) // alone
	take(1, 78)          // a lease of 2
	old := take(1, 77)   // paid by it
	take(1, 76)          // a lease of 4: 3 left
	before := scripts(t, client)
	take(0, 76) // a look, answered by the lease
	var paid []ratelimit.Result
	for r := int64(75); r > 72; r-- {
		paid = append(paid, take(1, r)) // the 3 tokens the lease holds
	}
	for _, r := range paid {
		refund(r) // back into the lease
	}
	refund(old) // paid by a lease that has been replaced: lost
	assert.Equal(t, int64(0), scripts(t, client)-before, "no round trip")
	for r := int64(75); r > 72; r-- {
		take(1, r) // the lease holds its 3 again, and no more
	}
	refund(alone) // paid by the bucket: back to Redis
	assert.Equal(t, int64(1), scripts(t, client)-before)
}

// TestLeaseTimesDiffer: while instances with different lease times share a
// key (a configuration being rolled out), a lease is granted only on the
// epochs of the leases outstanding; the other instance decides without one,
// and no decision fails.
func TestLeaseTimesDiffer(t *testing.T) {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	a := newStore(t, client, &redisstore.Options{Clock: c.Now, Lease: 50 * time.Millisecond})
	b := newStore(t, client, &redisstore.Options{Clock: c.Now, Lease: 20 * time.Millisecond})
	p := &ratelimit.Policy{Limit: ratelimit.PerSecond(1).WithBurst(80)}
	ctx := context.Background()
	for range 2 { // a holds a lease of 2, 1 left
		_, err := a.Take(ctx, p, "k", 1)
		require.NoError(t, err)
	}
	spent := int64(2)
	for range 6 {
		before := scripts(t, client)
		res, err := b.Take(ctx, p, "k", 1)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		spent++
		assert.Equal(t, int64(1), scripts(t, client)-before, "b leases nothing while a's lease is out")
	}
	res, err := b.Take(ctx, p, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 80-spent-1, res.Remaining, "a's token left is out of the bucket")
}

// TestLeaseLateReturn: what is left of a lease given back after its room
// stopped being kept (three to four lease times later) is lost, not given back: the
// bucket may have refilled into that room meanwhile, and giving it back
// would admit a token the exact bucket never had.
func TestLeaseLateReturn(t *testing.T) {
	client := redistest.Start(t).Client()
	c := new(storetest.Clock)
	a := newStore(t, client, &redisstore.Options{Clock: c.Now, Lease: 100 * time.Millisecond})
	b := newStore(t, client, &redisstore.Options{Clock: c.Now, NoRefusalCache: true})
	p := &ratelimit.Policy{Limit: ratelimit.PerSecond(10).WithBurst(16)}
	ctx := context.Background()
	var admitted []admission
	take := func(s *redisstore.Store) {
		t.Helper()
		res, err := s.Take(ctx, p, "k", 1)
		require.NoError(t, err)
		if res.Allowed {
			admitted = append(admitted, admission{c.Now().UnixNano(), 1})
		}
	}
	take(a)
	take(a)                           // a lease of 2, 1 left
	c.Advance(500 * time.Millisecond) // its room is kept four epochs at most
	for range 16 {
		take(b) // the bucket refilled: b spends all of it
	}
	take(a) // gives back its lease, too late
	requireExact(t, "k", p, admitted)
	assert.Len(t, admitted, 18)
}
