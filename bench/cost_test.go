package bench

import (
	"context"
	"hash/maphash"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

// BenchmarkOneKeyCost takes Decision/one-key/tokenfair apart, a step at a
// time, to show where a decision's time goes beyond the clock read:
//
//   - clock: one bare time.Since;
//   - bare: the least an exact, lock-free decision on a hashed key can do,
//     written inline: hash the key, find its slot, read the clock, decide
//     GCRA, compare-and-swap (no Result, no policy, no interface);
//   - decide: bare with Policy.Decide, which returns a Result, in place of
//     the inline GCRA;
//   - store: the memory store's Take, called directly;
//   - limiter: Limiter.Take, the decision BenchmarkDecision measures.
func BenchmarkOneKeyCost(b *testing.B) {
	store, err := memorystore.New(&memorystore.Options{MaxKeys: maxKeys})
	if err != nil {
		b.Fatal(err)
	}
	lim, err := ratelimit.New(store, tokenfairPolicy(allowAll))
	if err != nil {
		b.Fatal(err)
	}
	p := &lim.Policies()[0]
	var slots [1024]struct {
		fp    atomic.Uint64
		state atomic.Int64
	}
	seed := maphash.MakeSeed()
	start := time.Now()
	interval, tau := int64(allowAll.per)/int64(allowAll.n), int64(allowAll.per)
	ctx := context.Background()
	steps := []struct {
		name string
		take func(key string) bool
	}{
		{clock, func(string) bool { return time.Since(start) >= 0 }},
		{"bare", func(key string) bool {
			fp := maphash.String(seed, key)
			s := &slots[fp%uint64(len(slots))]
			if s.fp.Load() != fp {
				s.fp.Store(fp)
			}
			now := int64(time.Since(start))
			for {
				old := s.state.Load()
				next := max(old, now) + interval
				if next-now > tau {
					return false
				}
				if s.state.CompareAndSwap(old, next) {
					return true
				}
			}
		}},
		{"decide", func(key string) bool {
			fp := maphash.String(seed, key)
			s := &slots[fp%uint64(len(slots))]
			if s.fp.Load() != fp {
				s.fp.Store(fp)
			}
			now := int64(time.Since(start))
			for {
				old := s.state.Load()
				res, next := p.Decide(old, now, 1)
				if next == old || s.state.CompareAndSwap(old, next) {
					return res.Allowed
				}
			}
		}},
		{"store", func(key string) bool {
			res, err := store.Take(ctx, p, key, 1)
			return err == nil && res.Allowed
		}},
		{"limiter", func(key string) bool {
			res, err := lim.Take(ctx, key, 1)
			return err == nil && res.Allowed
		}},
	}
	for _, s := range steps {
		b.Run(s.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				if s.take("ak:one") {
					n++
				}
			}
			if n != b.N {
				b.Fatalf("%s allowed %d of %d", s.name, n, b.N)
			}
		})
	}
}
