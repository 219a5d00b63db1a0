package memorystore

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/tokenfair/ratelimit"
)

// A policy that never refuses in a benchmark (a billion tokens) and keeps
// every key held (each request leaves the bucket a second short of full, so
// no key is full again before the benchmark ends, and none is dropped).
var benchPolicy = ratelimit.Policy{Name: "bench", Limit: ratelimit.PerSecond(1).WithBurst(1_000_000_000)}

func benchStore(b *testing.B, opts *Options) *Store {
	s, err := New(opts)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// keys returns n keys shaped like the output of ratelimit.KeyByAPIKey.
func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("ak:%022d", i)
	}
	return ks
}

func BenchmarkTakeOneKey(b *testing.B) {
	for _, alg := range []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.LeakyPolice, ratelimit.LeakyShape} {
		name, _ := alg.MarshalText()
		b.Run(string(name), func(b *testing.B) {
			s := benchStore(b, nil)
			p := benchPolicy
			p.Algorithm = alg
			ctx := context.Background()
			b.ReportAllocs()
			allowed := 0
			for b.Loop() {
				if res, _ := s.Take(ctx, &p, "ak:one", 1); res.Allowed {
					allowed++
				}
			}
			if allowed == 0 {
				b.Fatal("nothing allowed")
			}
		})
	}
}

func BenchmarkTake100kKeys(b *testing.B) {
	s := benchStore(b, nil)
	ks := keys(100_000)
	ctx := context.Background()
	for _, k := range ks {
		s.Take(ctx, &benchPolicy, k, 1)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if res, _ := s.Take(ctx, &benchPolicy, ks[i%len(ks)], 1); !res.Allowed {
			b.Fatal("refused")
		}
		i++
	}
}

func BenchmarkTakeParallel1kKeys(b *testing.B) {
	s := benchStore(b, nil)
	ks := keys(1000)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if res, _ := s.Take(ctx, &benchPolicy, ks[i%len(ks)], 1); !res.Allowed {
				panic("refused")
			}
			i += 7
		}
	})
}

// BenchmarkBytesPerKey reports the heap held per key, the key's own bytes
// included, after 1 000 000 keys (run it with -benchtime=1x). Each key is a
// fresh string that only the store keeps, under a limit (10 a day) that
// keeps every key held however long the loop takes.
func BenchmarkBytesPerKey(b *testing.B) {
	const n = 1_000_000
	daily := ratelimit.Policy{Name: "bench", Limit: ratelimit.Per(10, 24*time.Hour)}
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := benchStore(b, &Options{MaxKeys: 2 * n})
		for i := range n {
			s.Take(context.Background(), &daily, fmt.Sprintf("ak:%022d", i), 1)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if s.Len() != n {
			b.Fatalf("held %d keys, want %d", s.Len(), n)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/key")
		runtime.KeepAlive(s)
	}
}

// BenchmarkTakeNewKeysAtCap decides a stream of new keys at the key cap, so
// that every request inserts a key and evicts one.
func BenchmarkTakeNewKeysAtCap(b *testing.B) {
	const maxKeys = 1 << 16
	s := benchStore(b, &Options{MaxKeys: maxKeys})
	ks := keys(16 * maxKeys)
	ctx := context.Background()
	for _, k := range ks[:maxKeys] {
		s.Take(ctx, &benchPolicy, k, 1)
	}
	b.ReportAllocs()
	i := maxKeys
	for b.Loop() {
		if res, _ := s.Take(ctx, &benchPolicy, ks[i%len(ks)], 1); !res.Allowed {
			b.Fatal("refused")
		}
		i++
	}
}
