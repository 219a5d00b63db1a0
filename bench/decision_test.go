package bench

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// key returns the i-th key, shaped like the output of ratelimit.KeyByAPIKey
// (25 bytes).
func key(i int) string { return fmt.Sprintf("ak:%022d", i) }

// keys returns the first n keys.
func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = key(i)
	}
	return ks
}

// clock names the Decision row that is no limiter but the floor the others
// are measured against: one bare time.Since per decision, the clock read
// that every limiter makes at least once.
const clock = "clock"

// newClock returns the clock baseline's decision: it reads the monotonic
// clock and allows every request, or, under denyAll, the first only.
func newClock(_ testing.TB, l limit) func(string) bool {
	start := time.Now()
	if l != denyAll {
		return func(string) bool { return time.Since(start) >= 0 }
	}
	first := true // all-denied runs serially
	return func(string) bool {
		ok := time.Since(start) >= 0 && first
		first = false
		return ok
	}
}

// decisionPeers are the rows of BenchmarkDecision: the clock baseline, the
// peers, and x/time/rate keyed in a sync.Map as well as in a map under a
// mutex.
var decisionPeers = append(append([]peer{{clock, newClock}}, peers...), peer{"x-time-rate-sync-map", newXTimeRateSyncMap})

// BenchmarkDecision measures one decision of each peer in one process:
//
//   - one-key: every request under one key, all allowed;
//   - 100k-keys: 100 000 keys (all seen once before timing) cycled, all allowed;
//   - parallel-1k-keys: GOMAXPROCS goroutines over 1 000 keys, all allowed;
//   - parallel-one-key: GOMAXPROCS goroutines on one hot key, all allowed;
//   - all-denied: one key whose quota is spent before timing, all refused.
//
// Each scenario has a clock row too, the baseline: one bare time.Since.
func BenchmarkDecision(b *testing.B) {
	b.Run("one-key", func(b *testing.B) {
		for _, p := range decisionPeers {
			b.Run(p.name, func(b *testing.B) {
				allow := p.new(b, allowAll)
				b.ReportAllocs()
				n := 0
				for b.Loop() {
					if allow("ak:one") {
						n++
					}
				}
				if n != b.N {
					b.Fatalf("%s allowed %d of %d", p.name, n, b.N)
				}
			})
		}
	})
	b.Run("100k-keys", func(b *testing.B) {
		ks := keys(100_000)
		for _, p := range decisionPeers {
			b.Run(p.name, func(b *testing.B) {
				allow := p.new(b, allowAll)
				for _, k := range ks {
					allow(k)
				}
				b.ReportAllocs()
				n, i := 0, 0
				for b.Loop() {
					if allow(ks[i]) {
						n++
					}
					if i++; i == len(ks) {
						i = 0
					}
				}
				if n != b.N {
					b.Fatalf("%s allowed %d of %d", p.name, n, b.N)
				}
			})
		}
	})
	b.Run("parallel-1k-keys", func(b *testing.B) {
		ks := keys(1000)
		for _, p := range decisionPeers {
			b.Run(p.name, func(b *testing.B) {
				allow := p.new(b, allowAll)
				var refused, seed atomic.Int64
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					i := int(seed.Add(1)*397) % len(ks)
					for pb.Next() {
						if !allow(ks[i]) {
							refused.Add(1)
						}
						if i += 7; i >= len(ks) {
							i -= len(ks)
						}
					}
				})
				if refused.Load() != 0 {
					b.Fatalf("%s refused %d of %d", p.name, refused.Load(), b.N)
				}
			})
		}
	})
	b.Run("parallel-one-key", func(b *testing.B) {
		for _, p := range decisionPeers {
			b.Run(p.name, func(b *testing.B) {
				if p.name == "throttled" {
					// Its in-memory GCRA gives up on a hot key after 10
					// failed compare-and-swaps, with an error.
					b.Skip("throttled fails on one key shared by every goroutine: \"Failed to store updated rate limit data ... after 10 attempts\"")
				}
				allow := p.new(b, allowAll)
				var refused atomic.Int64
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if !allow("ak:one") {
							refused.Add(1)
						}
					}
				})
				if refused.Load() != 0 {
					b.Fatalf("%s refused %d of %d", p.name, refused.Load(), b.N)
				}
			})
		}
	})
	b.Run("all-denied", func(b *testing.B) {
		for _, p := range decisionPeers {
			b.Run(p.name, func(b *testing.B) {
				allow := p.new(b, denyAll)
				if !allow("ak:one") {
					b.Fatalf("%s refused the first request", p.name)
				}
				b.ReportAllocs()
				n := 0
				for b.Loop() {
					if !allow("ak:one") {
						n++
					}
				}
				if n != b.N {
					b.Fatalf("%s refused %d of %d", p.name, n, b.N)
				}
			})
		}
	})
}

// BenchmarkBytesPerKey reports the heap each peer holds per key after one
// request under each of 1 000 000 distinct 25-byte keys, with a limit that
// keeps every key's state (run it with -benchtime=1x). Each key is a new
// string, as it would be when taken from a request, and only the peer keeps
// it, so a peer that holds its keys pays for their bytes.
func BenchmarkBytesPerKey(b *testing.B) {
	const n = 1_000_000
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				allow := p.new(b, holdKeys)
				for i := range n {
					if !allow(key(i)) {
						b.Fatalf("%s refused new key %q", p.name, key(i))
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "bytes/key")
				// The peer still holds the first key: of its ten requests
				// a day, nine are left.
				for i := range holdKeys.n - 1 {
					if !allow(key(0)) {
						b.Fatalf("%s refused request %d of key %q: it forgot the key", p.name, i+2, key(0))
					}
				}
				if allow(key(0)) {
					b.Fatalf("%s allowed request %d of key %q: it forgot the key", p.name, holdKeys.n+1, key(0))
				}
			}
		})
	}
}
