package main

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// genLog writes n lines of a Combined access log from keys clients over
// about n/200 seconds (200 requests a second), a few clients much busier
// than the rest, with now and then a line a second out of order.
func genLog(w io.Writer, n, keys int) {
	r := rand.New(rand.NewPCG(1, 1))
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range n {
		t := start.Add(time.Duration(i) * 5 * time.Millisecond)
		if r.IntN(100) == 0 {
			t = t.Add(-time.Second)
		}
		k := r.IntN(keys)
		if r.IntN(2) == 0 {
			k = r.IntN(10)
		}
		fmt.Fprintf(w, "10.%d.%d.%d - - [%s] \"GET /geocode?q=place%d HTTP/1.1\" 200 %d \"-\" \"Mozilla/5.0 (X11; Linux x86_64) client/%d\"\n",
			k>>16&255, k>>8&255, k&255, t.Format("02/Jan/2006:15:04:05 -0700"), i%50, 100+i%900, k%7)
	}
}

// BenchmarkReplayLog replays a generated access log of 1 000 000 lines and
// 10 000 clients, writing CSV. Each operation is the whole log; ns/line is
// the time per line.
func BenchmarkReplayLog(b *testing.B) {
	const n = 1_000_000
	var log bytes.Buffer
	genLog(&log, n, 10_000)
	b.ReportAllocs()
	b.SetBytes(int64(log.Len()))
	for b.Loop() {
		code := run([]string{"-log", "combined", "-rate", "2", "-burst", "20", "-format", "csv"}, bytes.NewReader(log.Bytes()), io.Discard, io.Discard)
		if code != 0 {
			b.Fatalf("exit status %d", code)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/line")
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/1M-lines")
}

// Memory grows with the number of keys, not of lines: twice the lines over
// the same keys allocate almost nothing more.
func TestStreamingAllocs(t *testing.T) {
	allocs := func(n int) float64 {
		var log bytes.Buffer
		genLog(&log, n, 100)
		return testing.AllocsPerRun(2, func() {
			code := run([]string{"-log", "combined", "-format", "csv"}, bytes.NewReader(log.Bytes()), io.Discard, io.Discard)
			require.Equal(t, 0, code)
		})
	}
	small, large := allocs(20_000), allocs(80_000)
	t.Logf("allocations: %v for 20 000 lines, %v for 80 000", small, large)
	assert.Less(t, large-small, 50.0, "allocations per extra line")
}
