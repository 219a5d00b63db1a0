package memorystore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/storetest"
)

// TestConcurrentDecisionsAreExact runs goroutines deciding requests on a
// few hot buckets, by Take and by TakeAll, against a clock that stands
// still during a round and moves between rounds, while other goroutines
// flood the store with new keys: it is at its key cap, so every insert
// evicts a key and every few inserts rebuild the table under the
// decisions in flight. After every round each hot bucket must hold exactly
// what the sequential model gives for the requests the store admitted,
// and the store's answers must be ones that some order of those requests
// gives:
//
//   - in a round of takes, the admitted cost is at most the tokens the
//     bucket had (at a fixed instant, a full bucket of burst b admits
//     exactly b, never one more), every refused request asked for more than
//     was left at the end, and the state moved by exactly the admitted cost;
//   - in a round of give-backs, the state moved back by exactly their sum,
//     and no further than full.
//
// It runs twice: as the store is, where a shard whose decisions race takes
// its lock for a while, and with that off, so that every decision on a
// held key races by compare-and-swap alone.
//
// A lost update (two decisions that read the same state and both write)
// breaks the state or the admitted count: built with -tags lostupdate, the
// store's compare-and-swap is a plain store, and this test must fail.
func TestConcurrentDecisionsAreExact(t *testing.T) {
	asIsAndLockFree(t, testConcurrentDecisions)
}

// asIsAndLockFree runs test on the store as it is, then with the lock
// after a race turned off (contended = 0), so that decisions race by
// compare-and-swap alone.
func asIsAndLockFree(t *testing.T, test func(*testing.T)) {
	t.Run("as-is", test)
	t.Run("lock-free", func(t *testing.T) {
		defer func(d int64) { contended = d }(contended)
		contended = 0
		test(t)
	})
}

func testConcurrentDecisions(t *testing.T) {
	const (
		rounds, workers, opsPerWorker = 300, 4, 60
		burst                         = 50
		interval                      = time.Millisecond
		maxKeys                       = 64
	)
	c := new(storetest.Clock)
	s := newStore(t, &Options{Clock: c.Now, Shards: 1, MaxKeys: maxKeys})
	ctx := context.Background()

	// Six hot buckets: three keys under two policies. Fewer than the
	// eviction sample, so a sample at the cap always holds a flood key,
	// which is closer to full (a nanosecond of a second's span) than any
	// hot bucket that is not full (a whole number of intervals of its 50:
	// the clock moves by whole intervals): the cap only ever drops hot
	// buckets that are full, which changes no decision.
	policies := []*ratelimit.Policy{
		{Name: "hot-a", Limit: ratelimit.Per(burst, burst*interval)},
		{Name: "hot-b", Limit: ratelimit.Per(burst, burst*interval)},
	}
	flood := &ratelimit.Policy{Name: "flood", Limit: ratelimit.Per(1e9, time.Second)}
	type bucket struct {
		p   *ratelimit.Policy
		key string
	}
	var hot []bucket
	for _, p := range policies {
		for k := range 3 {
			hot = append(hot, bucket{p, fmt.Sprint("hot-", k)})
		}
	}
	model := make([]int64, len(hot)) // each bucket's state, as the model has it
	iv := int64(interval)

	// op is one request of a round: on one bucket, or on two at once.
	type op struct {
		a, b    int // indexes in hot; b < 0 for a single Take
		cost    int64
		allowed bool // the request as a whole
		aOK     bool // the batch's result for a (its own bucket had room)
		bOK     bool
	}
	tables := map[*table]bool{}
	var floodKey atomic.Int64
	for round := range rounds {
		giveBack := round%3 == 2
		now := c.Now().UnixNano()
		ops := make([][]op, workers)
		for w := range ops {
			rng := rand.New(rand.NewPCG(uint64(round), uint64(w)))
			for range opsPerWorker {
				o := op{a: rng.IntN(len(hot)), b: -1, cost: 1 + rng.Int64N(5)}
				if giveBack {
					o.cost = -o.cost
				} else if rng.IntN(4) == 0 {
					if o.b = rng.IntN(len(hot) - 1); o.b >= o.a {
						o.b++
					}
				}
				ops[w] = append(ops[w], o)
			}
		}

		stop := make(chan struct{})
		floodStart := floodKey.Load()
		var flooders sync.WaitGroup
		for range 2 {
			flooders.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					res, err := s.Take(ctx, flood, fmt.Sprint("f", floodKey.Add(1)), 1)
					if err != nil || !res.Allowed {
						t.Errorf("a new flood key: %+v, %v", res, err)
						return
					}
				}
			})
		}
		var workersDone sync.WaitGroup
		for w := range workers {
			workersDone.Go(func() {
				results := make([]ratelimit.Result, 2)
				for i := range ops[w] {
					o := &ops[w][i]
					a := hot[o.a]
					if o.cost < 0 {
						// A refund of a take whose tokens are all still owed.
						if err := s.Refund(ctx, a.p, a.key, -o.cost, ratelimit.Result{Allowed: true, Until: math.MaxInt64 / 2}); err != nil {
							t.Error(err)
							return
						}
						o.allowed, o.aOK = true, true
						continue
					}
					if o.b < 0 {
						res, err := s.Take(ctx, a.p, a.key, o.cost)
						if err != nil {
							t.Error(err)
							return
						}
						o.allowed, o.aOK = res.Allowed, res.Allowed
						continue
					}
					b := hot[o.b]
					err := s.TakeAll(ctx, []ratelimit.BatchItem{{Policy: a.p, Key: a.key, Cost: o.cost}, {Policy: b.p, Key: b.key, Cost: o.cost}}, results)
					if err != nil {
						t.Error(err)
						return
					}
					o.aOK, o.bOK = results[0].Allowed, results[1].Allowed
					o.allowed = o.aOK && o.bOK
				}
			})
		}
		workersDone.Wait()
		// Enough flood keys for a rebuild every round, even when the
		// flooders got little CPU beside the workers on a loaded machine.
		for floodKey.Load() < floodStart+256 && !t.Failed() {
			runtime.Gosched()
		}
		close(stop)
		flooders.Wait()
		if t.Failed() {
			return
		}
		tables[s.shards[0].tab.Load()] = true

		for h, bk := range hot {
			start := max(model[h], now)
			tokens := burst - (start-now)/iv // the clock moves by whole intervals
			var admitted, refusedMin int64 = 0, burst + 1
			for w := range ops {
				for _, o := range ops[w] {
					switch {
					case o.a != h && o.b != h:
					case o.allowed:
						admitted += o.cost
					case o.a == h && !o.aOK, o.b == h && !o.bOK:
						refusedMin = min(refusedMin, o.cost)
					}
				}
			}
			var want int64
			if giveBack {
				want = max(start+admitted*iv, now) // admitted is the negative sum
			} else {
				require.LessOrEqual(t, admitted, tokens, "round %d, %s %s: admitted more than the %d tokens it had", round, bk.p.Name, bk.key, tokens)
				require.Greater(t, refusedMin, tokens-admitted, "round %d, %s %s: refused a cost of %d with %d tokens left", round, bk.p.Name, bk.key, refusedMin, tokens-admitted)
				want = start + admitted*iv
			}
			res, err := s.Take(ctx, bk.p, bk.key, 0)
			require.NoError(t, err)
			require.Equal(t, time.Duration(want-now), res.ResetAfter, "round %d, %s %s: the state after %d admitted", round, bk.p.Name, bk.key, admitted)
			model[h] = want
		}
		require.LessOrEqual(t, s.Len(), maxKeys)

		step := time.Duration(rand.IntN(8)) * interval
		if round%50 == 49 {
			step = 2 * time.Second // every bucket full, the flood keys gone
		}
		c.Advance(step)
	}
	t.Logf("%d flood keys, %d tables", floodKey.Load(), len(tables))
	require.Greater(t, len(tables), rounds/2, "the table was rebuilt under the decisions")
}
