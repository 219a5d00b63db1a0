package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestPacedToTheDemo is the measurement of the README: the client with 8
// workers geocodes 60 names against the demo at its defaults (5 a second,
// bursts of 10), in each of the demo's header formats, on the real clock.
// Every name is answered, at most one 429 is seen, and the whole takes
// what the quota allows, 10 at once and then 50 at 5 a second: 10 s, within
// 10 %. The three clients run side by side, each against its own server,
// so the test takes about 10 s; -v logs the README's table. It is skipped with
// -short.
func TestPacedToTheDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: TestPacedToTheDemo spends 10 s of the demo's quota in real time")
	}
	const allowed = 10 * time.Second
	places := []string{"amsterdam", "beijing", "berlin", "buenos aires", "cairo", "cape town", "istanbul", "london",
		"madrid", "mexico city", "moscow", "mumbai", "nairobi", "new york", "paris", "reykjavik", "rome", "singapore", "sydney", "tokyo"}
	var names strings.Builder
	for i := range 60 {
		fmt.Fprintln(&names, places[i%len(places)])
	}
	formats := []string{"ietf", "legacy", "x"}
	results := make([]result, len(formats))
	var wg sync.WaitGroup
	for i, format := range formats {
		url := startDemo(t, "-headers", format)
		wg.Go(func() { results[i] = geoclient(names.String(), "-url", url, "-concurrency", "8") })
	}
	wg.Wait()
	rows := make([]string, len(formats))
	for i, format := range formats {
		t.Run(format, func(t *testing.T) {
			r := results[i]
			assert.Equal(t, 0, r.code, "exit status; stderr:\n%s", r.stderr)
			got := summaryOf(t, r)
			assert.Equal(t, 60, got.ok, "names ok")
			assert.LessOrEqual(t, got.refused, 1, "429s seen")
			assert.InDelta(t, allowed.Seconds(), r.elapsed.Seconds(), 0.1*allowed.Seconds(), "wall time")
			rows[i] = fmt.Sprintf("| `%s` | %d of 60 | %d | %d | %.2f s | %.3f |", format, got.ok, got.refused, got.retries,
				r.elapsed.Seconds(), r.elapsed.Seconds()/allowed.Seconds())
		})
	}
	t.Logf("\n| `-headers` | names ok | 429 seen | retries | wall time | ratio to 10 s |\n|---|---:|---:|---:|---:|---:|\n%s",
		strings.Join(rows, "\n"))
}
