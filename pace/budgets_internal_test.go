package pace

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The answers the budgets are tested with, as field lines.
var (
	noFields  = http.Header{}
	quotaLeft = http.Header{"Ratelimit-Policy": {`"hourly";q=100;w=3600`}, "Ratelimit": {`"hourly";r=50;t=3600`}}
	spent     = http.Header{"Ratelimit": {`"minute";r=0;t=60`}}
)

func retryAfter(s int) http.Header { return http.Header{"Retry-After": {fmt.Sprint(s)}} }

// host returns the key of the i-th server.
func host(i int) string { return fmt.Sprintf("https://host-%05d.example", i) }

// visit draws on key's budget at now as a request does, and settles it
// with an answer of status and h when it may go. It reports whether it
// went.
func visit(bs *budgets, key string, now time.Time, status int, h http.Header) bool {
	b := bs.get(key, now)
	defer bs.put(b, now)
	tn, _, ok := b.take(now)
	if ok {
		b.settle(tn, strings.TrimPrefix(key, "https://"), status, h, now)
	}
	return ok
}

// answering is a base transport that answers every request with status
// and h, and counts the requests.
type answering struct {
	status int
	h      http.Header
	sent   int
}

func (a *answering) RoundTrip(r *http.Request) (*http.Response, error) {
	a.sent++
	return &http.Response{StatusCode: a.status, Header: a.h.Clone(), Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

// TestBudgetsCapped: through a Transport, 5 000 servers leave no more than
// maxBudgets budgets, whether they declare nothing, a quota left with a
// refill an hour away, or a Retry-After of an hour. Past maxBudgets
// servers that all asked to wait, the 1 025th draws on the shared budget,
// and its Retry-After holds every server after it, which are never sent a
// request.
func TestBudgetsCapped(t *testing.T) {
	const servers = 5000
	cases := []struct {
		name   string
		status int
		h      http.Header
		sent   int
	}{
		{"no fields", http.StatusOK, noFields, servers},
		{"quota left", http.StatusOK, quotaLeft, servers},
		{"Retry-After", http.StatusTooManyRequests, retryAfter(3600), maxBudgets + 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := &answering{status: c.status, h: c.h}
				tr := New(base, &Options{MaxRetries: -1})
				most, held := 0, 0
				for i := range servers {
					r, err := http.NewRequest("GET", host(i), nil)
					require.NoError(t, err)
					resp, err := tr.RoundTrip(r)
					if we := (*WaitError)(nil); errors.As(err, &we) {
						held++
						assert.Equal(t, "the Retry-After of a 429 from "+host(maxBudgets)[len("https://"):]+", which holds every server past the Transport's 1024 budgets", we.Cause)
						continue
					}
					require.NoError(t, err)
					resp.Body.Close()
					most = max(most, len(tr.budgets.m))
				}
				assert.Equal(t, maxBudgets, most, "most budgets kept")
				assert.Equal(t, c.sent, base.sent, "requests sent")
				assert.Equal(t, servers-c.sent, held, "requests held by the shared budget")
			})
		})
	}
}

// TestBudgetsKeepWaits: the budgets in a wait (a Retry-After, a spent
// quota until its refill) or in use are kept while 5 000 other servers
// come, and the budgets used the longest ago, holding nothing, go; once
// the waits are over, those budgets go too, but never the one in use.
func TestBudgetsKeepWaits(t *testing.T) {
	var bs budgets
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	require.True(t, visit(&bs, "https://held.example", start, http.StatusTooManyRequests, retryAfter(30)))
	require.True(t, visit(&bs, "https://spent.example", start, http.StatusOK, spent))
	require.True(t, visit(&bs, "https://left.example", start, http.StatusOK, quotaLeft))
	busy := bs.get("https://busy.example", start)
	has := func(key string) bool { _, ok := bs.m[key]; return ok }
	kept := map[string]*budget{}
	for _, k := range []string{"https://held.example", "https://spent.example", "https://busy.example"} {
		kept[k] = bs.m[k]
	}

	now := start
	for i := range 5000 {
		now = start.Add(time.Duration(i) * time.Millisecond)
		require.True(t, visit(&bs, host(i), now, http.StatusOK, noFields), "visit(%q)", host(i))
	}
	assert.Len(t, bs.m, maxBudgets)
	for k, b := range kept {
		assert.Same(t, b, bs.m[k], "budget of %s", k)
	}
	_, h, ok := bs.m["https://held.example"].take(now)
	assert.False(t, ok, "held.example may go during its Retry-After")
	assert.Equal(t, 429, h.status)
	_, h, ok = bs.m["https://spent.example"].take(now)
	assert.False(t, ok, "spent.example may go before its refill")
	assert.True(t, h.refill)
	assert.False(t, has("https://left.example"), "a quota left holds nothing")
	first := 5000 - (maxBudgets - len(kept)) // the oldest server kept
	assert.False(t, has(host(first-1)), "the newest server forgotten, %s, kept", host(first-1))
	assert.True(t, has(host(first)), "the oldest server kept, %s, forgotten", host(first))

	now = start.Add(61 * time.Second)
	for i := range maxBudgets {
		visit(&bs, host(5000+i), now, http.StatusOK, noFields)
	}
	assert.Len(t, bs.m, maxBudgets)
	assert.False(t, has("https://held.example"), "held.example kept past its wait")
	assert.False(t, has("https://spent.example"), "spent.example kept past its refill")
	assert.Same(t, busy, bs.m["https://busy.example"], "the budget in use")
	bs.put(busy, now)
}

// TestSharedBudget: when every budget kept is in a wait, a new server
// draws on the shared budget; the wait it asks for there holds every new
// server until it ends, so that none of them, itself included, is sent a
// request before then. Once the waits of the budgets kept end, new servers
// get budgets of their own again.
func TestSharedBudget(t *testing.T) {
	var bs budgets
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range maxBudgets {
		visit(&bs, host(i), start, http.StatusTooManyRequests, retryAfter(60))
	}
	require.Len(t, bs.m, maxBudgets)

	assert.True(t, visit(&bs, "https://x.example", start, http.StatusTooManyRequests, retryAfter(30)), "x.example, first")
	require.NotNil(t, bs.spill)
	_, kept := bs.m["https://x.example"]
	assert.False(t, kept, "x.example has a budget of its own")

	for _, k := range []string{"https://x.example", "https://y.example"} {
		b := bs.get(k, start.Add(10*time.Second))
		_, h, ok := b.take(start.Add(10 * time.Second))
		bs.put(b, start.Add(10*time.Second))
		assert.Same(t, bs.spill, b, "the budget of %s", k)
		assert.False(t, ok, "%s may go", k)
		assert.Equal(t, 20*time.Second, h.d)
		assert.Equal(t, "the Retry-After of a 429 from x.example, which holds every server past the Transport's 1024 budgets", h.cause(k))
	}

	assert.True(t, visit(&bs, "https://y.example", start.Add(30*time.Second), http.StatusOK, noFields), "y.example once x.example's wait ended")
	_, kept = bs.m["https://y.example"]
	assert.False(t, kept, "y.example has a budget of its own while every budget kept waits")

	assert.True(t, visit(&bs, "https://y.example", start.Add(60*time.Second), http.StatusOK, noFields), "y.example once the waits ended")
	_, kept = bs.m["https://y.example"]
	assert.True(t, kept, "y.example has a budget of its own once the waits ended")
	assert.Len(t, bs.m, maxBudgets)
}

// TestBudgetsConcurrent: budgets got and put back by 8 goroutines at once,
// over 3 000 servers, some of them the same, stay within maxBudgets, and
// every budget no request uses is in its place in the heap.
func TestBudgetsConcurrent(t *testing.T) {
	var bs budgets
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				now := start.Add(time.Duration(i) * time.Millisecond)
				status, h := http.StatusOK, quotaLeft
				if i%10 == 0 {
					status, h = http.StatusTooManyRequests, retryAfter(1)
				}
				visit(&bs, host((g*389+i*7)%3000), now, status, h)
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, len(bs.m), maxBudgets)
	assert.Len(t, bs.free.b, len(bs.m), "budgets not in use")
	for i, b := range bs.free.b {
		assert.Equal(t, i, b.idx, "the place of %s", b.key)
		assert.Same(t, b, bs.m[b.key], "the budget of %s", b.key)
		if i > 0 {
			parent := bs.free.b[(i-1)/2]
			assert.False(t, b.freeSince.Before(parent.freeSince), "%s before its parent in the heap", b.key)
		}
	}
}

// TestBudgetsForgetWithoutWalk: a new server, once there are maxBudgets,
// looks at a few budgets (the heap's comparisons, about two a level), never
// at all of them, whether the budgets kept may go or are all in a wait.
func TestBudgetsForgetWithoutWalk(t *testing.T) {
	const servers = 5000
	bound := 3 * bits.Len(maxBudgets) // 33, where a walk looks at 1 024
	for _, c := range []struct {
		name   string
		status int
		h      http.Header
	}{
		{"quota left", http.StatusOK, quotaLeft},
		{"Retry-After", http.StatusServiceUnavailable, retryAfter(3600)},
	} {
		t.Run(c.name, func(t *testing.T) {
			var bs budgets
			now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			for i := range maxBudgets {
				visit(&bs, host(i), now, c.status, c.h)
			}
			require.Len(t, bs.m, maxBudgets)
			bs.free.visited = 0
			for i := range servers {
				now = now.Add(time.Millisecond)
				visit(&bs, host(maxBudgets+i), now, http.StatusOK, noFields)
			}
			perServer := float64(bs.free.visited) / servers
			t.Logf("%s: %.1f budgets looked at per new server", c.name, perServer)
			assert.LessOrEqual(t, perServer, float64(bound), "budgets looked at per new server")
			assert.Len(t, bs.m, maxBudgets)
		})
	}
}

// TestBudgetMemory: what a budget costs, with its key and its place in the
// map and the heap, after an answer with quota fields; 5 000 servers cost
// no more than maxBudgets of them.
func TestBudgetMemory(t *testing.T) {
	heapAlloc := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	var bs budgets
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	before := heapAlloc()
	for i := range maxBudgets {
		visit(&bs, host(i), now, http.StatusOK, quotaLeft)
	}
	full := heapAlloc()
	for i := range 5000 - maxBudgets {
		visit(&bs, host(maxBudgets+i), now, http.StatusOK, quotaLeft)
	}
	after := heapAlloc()
	perBudget := (full - before) / maxBudgets
	t.Logf("%d B a budget; %d budgets: %d B; after 5 000 servers: %d B", perBudget, maxBudgets, full-before, after-before)
	assert.LessOrEqual(t, perBudget, int64(512), "bytes a budget")
	assert.LessOrEqual(t, after-before, (full-before)*5/4, "bytes after 5 000 servers")
	runtime.KeepAlive(&bs)
}

// BenchmarkBudgetsNewServer: the cost of a new server once there are
// maxBudgets budgets, each with a quota left.
func BenchmarkBudgetsNewServer(b *testing.B) {
	var bs budgets
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range maxBudgets {
		visit(&bs, host(i), now, http.StatusOK, quotaLeft)
	}
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = host(maxBudgets + i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		now = now.Add(time.Millisecond)
		visit(&bs, keys[i], now, http.StatusOK, quotaLeft)
	}
	b.ReportMetric(float64(bs.free.visited)/float64(b.N), "looks/op")
}
