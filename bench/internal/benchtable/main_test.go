package main

import (
	"bytes"
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/tokenfair/ratelimit/bench
cpu: AMD EPYC
,results.txt,
,sec/op,CI
Decision/one-key/clock-2,5e-08,1%
Decision/one-key/tokenfair-2,2e-07,3%
Decision/one-key/x-time-rate-2,1e-07,1%
HTTP/tokenfair-2,2e-06,∞
RedisLease/hot/incr-2,8.7e-06,1%
RedisLease/hot/tokenfair-lease-2,1.41e-07,2%
geomean,3e-07,

,round-trips/op,CI
RedisLease/hot/incr-2,1,0%
RedisLease/hot/tokenfair-lease-2,0.001224,5%

,allocs/op,CI
Decision/one-key/tokenfair-2,0,0%
Decision/one-key/x-time-rate-2,2,0%
HTTP/tokenfair-2,14,0%

,bytes/key,CI
BytesPerKey/tokenfair-2,132.4,1%
BytesPerKey/httprate-2,37.76,2%
`

func TestTables(t *testing.T) {
	groups, order, err := read(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(order, " "), "Decision/one-key HTTP RedisLease/hot BytesPerKey"; got != want {
		t.Fatalf("groups %q, want %q", got, want)
	}
	var b bytes.Buffer
	write(&b, groups, order)
	// A group's full table, as HTTP's.
	detail(&b, "RedisLease/hot", groups["RedisLease/hot"])
	out := b.String()
	for _, want := range []string{
		"| peer | Decision/one-key (ns/op) | BytesPerKey (bytes/key) | allocs/op |",
		"| tokenfair | 200 (1.00×) | 132 (1.00×) | 0 |",
		"| x-time-rate | 100 (0.50×) | — | 2 |",
		"| clock | 50.0 (0.25×) | — | — |",
		"| httprate | — | 37.8 (0.29×) | — |",
		"| peer | ns/op | allocs/op | ratio to ours (ns/op) |",
		"| tokenfair | 2000 | 14 | 1.00× |",
		// Without ours in the group, no ratio.
		"| incr | 8700 |",
		// Below 0.1, two significant figures: a lease's round trips are
		// not 0.00.
		"| tokenfair-lease | 141 ± 2% | 0.0012 | — | 0.016× |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
