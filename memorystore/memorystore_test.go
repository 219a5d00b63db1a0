package memorystore

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
	"time"
	_ "time/tzdata" // Europe/Paris on any machine
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newStore returns a store configured by opts.
func newStore(tb testing.TB, opts *Options) *Store {
	tb.Helper()
	s, err := New(opts)
	require.NoError(tb, err)
	return s
}

// newLimiter returns a limiter of policies on s.
func newLimiter(t *testing.T, s *Store, policies ...ratelimit.Policy) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(s, policies...)
	require.NoError(t, err)
	return l
}

// raceEnabled reports whether the test runs under the race detector.
func raceEnabled() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		return newStore(t, &Options{Clock: now})
	})
}

func TestConformanceOneShard(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		return newStore(t, &Options{Clock: now, Shards: 1})
	})
}

var p = ratelimit.Policy{Name: "p", Limit: ratelimit.PerSecond(5).WithBurst(10)}

func TestOptions(t *testing.T) {
	for _, opts := range []*Options{nil, {}} {
		s, err := New(opts)
		require.NoError(t, err)
		assert.Len(t, s.shards, 256, "default shards")
		assert.Equal(t, 1<<20/256, s.perShard, "default MaxKeys per shard")
	}
	s := newStore(t, &Options{MaxKeys: 100, Shards: 6})
	assert.Len(t, s.shards, 4, "rounded down to a power of two")
	assert.Equal(t, 25, s.perShard)
	s = newStore(t, &Options{MaxKeys: 3, Shards: 64})
	assert.Len(t, s.shards, 2, "at most MaxKeys, rounded down")

	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{MaxKeys: -1}, "memorystore: MaxKeys -1: want at least 1, or 0 for the default"},
		{Options{Shards: -5}, "memorystore: Shards -5: want at least 1, or 0 for the default"},
	} {
		s, err := New(&tc.opts)
		assert.Nil(t, s)
		assert.EqualError(t, err, tc.want, "New(%+v)", tc.opts)
	}
}

func TestFullBucketsAreDropped(t *testing.T) {
	c := new(storetest.Clock)
	s := newStore(t, &Options{Clock: c.Now, Shards: 1})
	ctx := context.Background()
	_, _ = s.Take(ctx, &p, "peek", 0)
	assert.Equal(t, 0, s.Len(), "a peek at a new key stores nothing")
	_, _ = s.Take(ctx, &p, "a", 1)  // full again in 200 ms
	_, _ = s.Take(ctx, &p, "b", 10) // full again in 2 s
	assert.Equal(t, 2, s.Len())
	c.Advance(200 * time.Millisecond)
	_, _ = s.Take(ctx, &p, "a", 0)
	assert.Equal(t, 2, s.Len(), "a key full again is kept for a while")
	c.Advance(time.Duration(keepFull))
	_, _ = s.Take(ctx, &p, "b", 0) // one tidy goes round the small table
	assert.Equal(t, 1, s.Len(), "a key full for keepFull is dropped")
}

// roomy never refuses in these tests, and a request leaves its bucket short
// of full for a millisecond.
var roomy = ratelimit.Policy{Name: "roomy", Limit: ratelimit.PerSecond(1000).WithBurst(1_000_000)}

// TestIdleKeysAreDroppedByLaterWrites: keys nobody asks about any more are
// dropped, and the tables that held them shrink, as other requests are
// decided while time passes: whether they insert keys, touch held ones or
// store nothing. No sweep is called and the store has no goroutine that
// could run one.
func TestIdleKeysAreDroppedByLaterWrites(t *testing.T) {
	ctx := context.Background()
	busy := make([]string, 64)
	for i := range busy {
		busy[i] = fmt.Sprint("busy-", i)
	}
	const step = 10 * time.Microsecond // between writes: a shard tidies at most once a millisecond
	for _, tc := range []struct {
		name string
		take func(s *Store, i int)
		held func(writes int) int // keys the writes themselves leave held
	}{
		// A new key is held for its millisecond and keepFull after, longer
		// than the test takes.
		{"new keys", func(s *Store, i int) { _, _ = s.Take(ctx, &roomy, fmt.Sprint("new-", i), 1) }, func(n int) int { return n }},
		{"a few busy keys", func(s *Store, i int) { _, _ = s.Take(ctx, &roomy, busy[i%len(busy)], 1) }, func(n int) int { return min(n, len(busy)) }},
		{"peeks at new keys", func(s *Store, i int) { _, _ = s.Take(ctx, &roomy, fmt.Sprint("peek-", i), 0) }, func(int) int { return 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const idle, maxWrites = 5000, 1_000_000
			c := new(storetest.Clock)
			s := newStore(t, &Options{Clock: c.Now, Shards: 8})
			for i := range idle {
				_, _ = s.Take(ctx, &p, fmt.Sprint("idle-", i), 1)
			}
			require.Equal(t, idle, s.Len())
			c.Advance(time.Second + time.Duration(keepFull)) // every idle bucket full for keepFull
			writes := 0
			for ; writes < maxWrites && s.Len() > tc.held(writes); writes++ {
				c.Advance(step)
				tc.take(s, writes)
			}
			require.Less(t, time.Duration(writes)*step, time.Duration(keepFull), "the writes' own keys would go too")
			require.Equal(t, tc.held(writes), s.Len(), "idle keys still held after %d writes", writes)
			t.Logf("%d idle keys dropped after %d writes", idle, writes)
			for i := range s.shards {
				sh := &s.shards[i]
				assert.LessOrEqual(t, len(sh.tab.Load().slots), max(minSlots, 8*sh.live), "shard %d shrank: %d slots for %d keys", i, len(sh.tab.Load().slots), sh.live)
			}
		})
	}
}

// TestTidyKeepsLiveKeys: dropping idle keys and shrinking the table around
// them keeps the key still in use, and its state to the nanosecond.
func TestTidyKeepsLiveKeys(t *testing.T) {
	c := new(storetest.Clock)
	s := newStore(t, &Options{Clock: c.Now, Shards: 1})
	ctx := context.Background()
	for i := range 5000 {
		_, _ = s.Take(ctx, &p, strconv.Itoa(i), 1)
	}
	c.Advance(time.Second + time.Duration(keepFull))
	_, _ = s.Take(ctx, &p, "live", 10) // full again in 2 s
	const step = 100 * time.Microsecond
	elapsed := time.Duration(0)
	for i := 0; i < 1_000_000 && s.Len() > 1; i++ {
		c.Advance(step)
		elapsed += step
		_, _ = s.Take(ctx, &p, "live", 0)
	}
	require.Equal(t, 1, s.Len())
	require.Less(t, elapsed, 2*time.Second, "the live key would be full")
	assert.Equal(t, minSlots, len(s.shards[0].tab.Load().slots), "the table shrank")
	res, _ := s.Take(ctx, &p, "live", 0)
	assert.Equal(t, 2*time.Second-elapsed, res.ResetAfter, "the live key's state survived the moves")
}

// TestNoGoroutine: a store starts no goroutine, so stores made, used and
// dropped without any Close leak none. (goleak in TestMain also checks the
// whole run.)
func TestNoGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for i := range 100 {
		s, err := New(&Options{Shards: 1 + i%8})
		require.NoError(t, err)
		_, _ = s.Take(context.Background(), &p, "k", 1)
	}
	runtime.GC()
}

func TestMaxKeys(t *testing.T) {
	c := new(storetest.Clock)
	s := newStore(t, &Options{Clock: c.Now, MaxKeys: 100, Shards: 4})
	ctx := context.Background()
	// A drained bucket for a key we care about, then a flood of unique keys.
	_, _ = s.Take(ctx, &p, "victim", 10)
	for i := range 10_000 {
		c.Advance(time.Microsecond)
		res, err := s.Take(ctx, &p, fmt.Sprint("flood-", i), 1)
		require.NoError(t, err)
		require.True(t, res.Allowed, "new keys are always admitted at the cap")
		require.LessOrEqual(t, s.Len(), 100)
	}
	assert.Equal(t, 100, s.Len())
}

func TestMaxKeysEvictsNearlyFullFirst(t *testing.T) {
	c := new(storetest.Clock)
	s := newStore(t, &Options{Clock: c.Now, MaxKeys: 8, Shards: 1})
	ctx := context.Background()
	_, _ = s.Take(ctx, &p, "drained", 10) // full again in 2 s
	for i := range 7 {
		_, _ = s.Take(ctx, &p, fmt.Sprint("light-", i), 1) // full again in 200 ms
	}
	_, _ = s.Take(ctx, &p, "new", 1)
	assert.Equal(t, 8, s.Len())
	res, _ := s.Take(ctx, &p, "drained", 1)
	assert.False(t, res.Allowed, "the drained key (farthest from full) is kept")
}

func TestExpiredKeysMakeRoomBeforeEviction(t *testing.T) {
	c := new(storetest.Clock)
	s := newStore(t, &Options{Clock: c.Now, MaxKeys: 3, Shards: 1})
	ctx := context.Background()
	_, _ = s.Take(ctx, &p, "short-1", 1)
	_, _ = s.Take(ctx, &p, "short-2", 1)
	_, _ = s.Take(ctx, &p, "long", 10)
	c.Advance(300 * time.Millisecond) // the short ones are full again, "long" is not
	_, _ = s.Take(ctx, &p, "new", 1)
	assert.Equal(t, 2, s.Len(), "every expired key in the sample was dropped")
	res, _ := s.Take(ctx, &p, "long", 2)
	assert.False(t, res.Allowed, "the drained key (1.5 tokens) was kept")
}

func TestTakeDoesNotAllocate(t *testing.T) {
	s := newStore(t, nil)
	slow := ratelimit.Policy{Name: "slow", Limit: ratelimit.Per(1, time.Hour).WithBurst(1000)}
	ctx := context.Background()
	_, _ = s.Take(ctx, &slow, "present", 1)
	allocs := testing.AllocsPerRun(1000, func() { _, _ = s.Take(ctx, &slow, "present", 0) })
	assert.Zero(t, allocs)
	allocs = testing.AllocsPerRun(500, func() { _, _ = s.Take(ctx, &slow, "present", 1) })
	assert.Zero(t, allocs)

	reqs := []ratelimit.BatchItem{{Policy: &slow, Key: "present", Cost: 1}, {Policy: &ratelimit.Policy{Name: "global", Limit: slow.Limit}, Key: "*", Cost: 1}}
	results := make([]ratelimit.Result, len(reqs))
	require.NoError(t, s.TakeAll(ctx, reqs, results))
	allocs = testing.AllocsPerRun(300, func() { _ = s.TakeAll(ctx, reqs, results) })
	assert.Zero(t, allocs, "a batch of keys held")

	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	daily := ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(1_000_000, paris)}
	_, _ = s.Take(ctx, &daily, "present", 1)
	allocs = testing.AllocsPerRun(500, func() { _, _ = s.Take(ctx, &daily, "present", 1) })
	assert.Zero(t, allocs, "a calendar quota's key held")
}

func TestShardIs128Bytes(t *testing.T) {
	assert.Equal(t, uintptr(128), unsafe.Sizeof(shard{}), "shard padding")
}

// TestTakeAllSameBucketTwice: two requests of one batch on one bucket are
// decided one after the other, so both spend, and the batch is refused
// when the second no longer fits.
func TestTakeAllSameBucketTwice(t *testing.T) {
	s := newStore(t, &Options{Clock: new(storetest.Clock).Now})
	ctx := context.Background()
	results := make([]ratelimit.Result, 2)
	twice := []ratelimit.BatchItem{{Policy: &p, Key: "k", Cost: 4}, {Policy: &p, Key: "k", Cost: 4}}
	require.NoError(t, s.TakeAll(ctx, twice, results))
	assert.True(t, results[0].Allowed && results[1].Allowed)
	assert.Equal(t, int64(2), results[1].Remaining, "the second saw the first's spending")
	then := []ratelimit.BatchItem{{Policy: &p, Key: "k", Cost: 2}, {Policy: &p, Key: "k", Cost: 1}}
	require.NoError(t, s.TakeAll(ctx, then, results))
	assert.True(t, results[0].Allowed, "the 2 tokens left")
	assert.False(t, results[1].Allowed, "none after the first")
	res, err := s.Take(ctx, &p, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(2), res.Remaining, "the refused batch spent nothing")
}

// TestKeyFlood sends 10 000 000 distinct keys through a store capped at
// 100 000 keys: it never holds more, and its heap stays within the cap's
// worth of memory. (Without the race detector, which would make it slow:
// ./scripts/test runs it on its own.)
func TestKeyFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("10 000 000 requests")
	}
	if raceEnabled() {
		t.Skip("10 000 000 requests under the race detector")
	}
	const keys, limit = 10_000_000, 100_000
	s := newStore(t, &Options{MaxKeys: limit})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	buf := []byte("ip:")
	ctx := context.Background()
	peak := uint64(0)
	for i := range keys {
		key := string(strconv.AppendInt(buf[:3], int64(i), 10))
		res, err := s.Take(ctx, &p, key, 1)
		require.NoError(t, err)
		require.True(t, res.Allowed, "a new key is always admitted")
		if i%1_000_000 == 0 {
			var m runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
		}
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	peak = max(peak, after.HeapAlloc)
	assert.LessOrEqual(t, s.Len(), limit)
	growth := int64(peak) - int64(before.HeapAlloc)
	t.Logf("%d keys held; heap grew by %.1f MB at most (%.0f bytes per held key)", s.Len(), float64(growth)/1e6, float64(growth)/float64(s.Len()))
	assert.Less(t, growth, int64(8_000_000), "100 000 slots of 16 bytes, at least a quarter of the tables empty, a table being copied as it grows")
}

// A policy that never refuses in a benchmark (a billion tokens) and keeps
// every key held (each request leaves the bucket a second short of full, so
// no key is full again before the benchmark ends, and none is dropped).
var benchPolicy = ratelimit.Policy{Name: "bench", Limit: ratelimit.PerSecond(1).WithBurst(1_000_000_000)}

// keys returns n keys shaped like the output of ratelimit.KeyByAPIKey.
func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("ak:%022d", i)
	}
	return ks
}

// BenchmarkTakeOneKey decides one key held, under each algorithm and as a
// calendar quota (in UTC and in a zone of its own).
func BenchmarkTakeOneKey(b *testing.B) {
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(b, err)
	var policies []ratelimit.Policy
	for _, alg := range []ratelimit.Algorithm{ratelimit.TokenBucket, ratelimit.LeakyPolice, ratelimit.LeakyShape} {
		name, _ := alg.MarshalText()
		p := benchPolicy
		p.Name, p.Algorithm = string(name), alg
		policies = append(policies, p)
	}
	policies = append(policies,
		ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(1e12, time.UTC)},
		ratelimit.Policy{Name: "daily-paris", Limit: ratelimit.Daily(1e12, paris)})
	for _, p := range policies {
		b.Run(p.Name, func(b *testing.B) {
			s := newStore(b, nil)
			lim, err := ratelimit.New(s, p) // the policy as a Limiter hands it to the store
			require.NoError(b, err)
			p := lim.Policies()[0]
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
	s := newStore(b, nil)
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
	s := newStore(b, nil)
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
		s := newStore(b, &Options{MaxKeys: 2 * n})
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
	s := newStore(b, &Options{MaxKeys: maxKeys})
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
