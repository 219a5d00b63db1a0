package bench

import (
	"context"
	"hash/maphash"
	"sync/atomic"
	"testing"
	"time"
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
	lim, store := tokenfairLimiter(b, allowAll)
	p := &lim.Policies()[0]
	type slot struct {
		fp    atomic.Uint64
		state atomic.Int64
	}
	var slots [1024]slot
	seed := maphash.MakeSeed()
	start := time.Now()
	// find returns the slot of key and the time: the same first steps for
	// bare and decide.
	find := func(key string) (*slot, int64) {
		fp := maphash.String(seed, key)
		s := &slots[fp%uint64(len(slots))]
		if s.fp.Load() != fp {
			s.fp.Store(fp)
		}
		return s, int64(time.Since(start))
	}
	interval, tau := int64(allowAll.per)/int64(allowAll.n), int64(allowAll.per)
	ctx := context.Background()
	steps := []struct {
		name string
		take func(key string) bool
	}{
		{clock, func(string) bool { return time.Since(start) >= 0 }},
		{"bare", func(key string) bool {
			s, now := find(key)
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
			s, now := find(key)
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
