package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/failover"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/redisstore"
)

// The end-to-end failover tests (failover_sentinel_test.go and
// failover_cluster_test.go, with this file's load and failover_loss_test.go's
// accounting) kill a Redis primary of a real topology, started by
// redistest, while two instances of a service use it, each with its own
// client, Store, failover.Store and Limiter on one Prefix, and check every
// answer. They run on real time: a Sentinel or a Cluster fails over in
// about two seconds. Each logs one row of a markdown table of what it
// measured.

const (
	// recoverWithin bounds the time from a primary's death to the last
	// answer that is not normal.
	recoverWithin = 15 * time.Second
	// followWithin bounds the time from a replica's promotion to the
	// stores' first normal answers from it: they follow it by themselves.
	followWithin = 2 * time.Second
	// calmFor is how long every answer must have been normal before a test
	// takes the store as recovered.
	calmFor = time.Second
)

// instance is one instance of a service: a client of its own, a Store, a
// failover.Store of a mode and a Limiter of the test's policy; and a
// Limiter of the policy "look" on the same failover.Store, whose looks
// (cost 0) at a key check that the part of Redis that holds it answers
// (another bucket of the same key, in the same Cluster slot, that no
// lease or refusal cache answers).
type instance struct {
	mode failover.Mode
	lim  *ratelimit.Limiter
	look *ratelimit.Limiter
}

// newInstance returns an instance over client, its Store configured by
// opts (Timeout callTimeout unless set), its failover.Store by mode (two
// instances, a probe every 100 ms).
func newInstance(t *testing.T, client redis.Scripter, mode failover.Mode, opts redisstore.Options, p ratelimit.Policy) *instance {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = callTimeout
	}
	store, err := redisstore.New(client, &opts)
	require.NoError(t, err)
	local, err := memorystore.New(nil)
	require.NoError(t, err)
	fo, err := failover.New(store, &failover.Options{Mode: mode, Local: local, Instances: 2,
		ProbeInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	lim, err := ratelimit.New(fo, p)
	require.NoError(t, err)
	look, err := ratelimit.New(fo, ratelimit.Policy{Name: "look", Limit: p.Limit})
	require.NoError(t, err)
	return &instance{mode: mode, lim: lim, look: look}
}

// pairs returns two instances for each mode, each with a client of its
// own from client, the two of a mode sharing the Prefix "failover:MODE:".
func pairs(t *testing.T, client func() redis.Scripter, p ratelimit.Policy) []*instance {
	t.Helper()
	var insts []*instance
	for _, mode := range modes {
		for range 2 {
			insts = append(insts, newInstance(t, client(), mode, redisstore.Options{Prefix: "failover:" + mode.String() + ":"}, p))
		}
	}
	return insts
}

// kind is what an answer is, for a mode.
type kind uint8

const (
	normal   kind = iota // decided by Redis: no error, not Degraded
	fallback             // as the mode says while Redis fails
	wrong                // neither
)

func classify(mode failover.Mode, res ratelimit.Result, err error) kind {
	switch {
	case err == nil && !res.Degraded:
		return normal
	case mode == failover.Open && err == nil && res.Degraded && res.Allowed,
		mode == failover.Closed && errors.Is(err, ratelimit.ErrStore),
		mode == failover.Local && err == nil && res.Degraded:
		return fallback
	}
	return wrong
}

// answer is one decision as the load saw it.
type answer struct {
	inst       int
	mode       failover.Mode
	key        string
	start, end time.Time
	kind       kind
	allowed    bool
	err        error
}

func (a answer) String() string {
	return fmt.Sprintf("instance %d (%s), key %q, at %s, took %v: kind %d, allowed %v, err %v",
		a.inst, a.mode, a.key, a.start.Format("15:04:05.000"), a.end.Sub(a.start), a.kind, a.allowed, a.err)
}

// load takes tokens from every instance on two goroutines each, one call
// every few milliseconds, and records every answer.
type load struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	answers  []answer
	abnormal atomic.Int64   // end of the last answer that was not normal, Unix ns
	normals  []atomic.Int64 // normal answers, per instance
}

// startLoad starts the load on insts, goroutine g of instance inst taking
// on the key keys(inst, g, i) for its call i.
func startLoad(t *testing.T, insts []*instance, keys func(inst, g, i int) string) *load {
	l := &load{stop: make(chan struct{}), normals: make([]atomic.Int64, len(insts))}
	for n, in := range insts {
		for g := range 2 {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				var mine []answer
				defer func() {
					l.mu.Lock()
					l.answers = append(l.answers, mine...)
					l.mu.Unlock()
				}()
				for i := 0; ; i++ {
					select {
					case <-l.stop:
						return
					default:
					}
					a := answer{inst: n, mode: in.mode, key: keys(n, g, i), start: time.Now()}
					res, err := in.lim.Take(context.Background(), a.key, 1)
					a.end, a.kind, a.allowed, a.err = time.Now(), classify(in.mode, res, err), res.Allowed, err
					if a.kind == normal {
						l.normals[n].Add(1)
					} else {
						l.abnormal.Store(a.end.UnixNano())
					}
					mine = append(mine, a)
					time.Sleep(4 * time.Millisecond)
				}
			}()
		}
	}
	t.Cleanup(func() { l.finish() })
	return l
}

// finish stops the load and returns its answers in the order they ended.
func (l *load) finish() []answer {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	slices.SortFunc(l.answers, func(a, b answer) int { return a.end.Compare(b.end) })
	return l.answers
}

// warm waits until every instance has had normal answers.
func (l *load) warm(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := range l.normals {
		for l.normals[i].Load() < 20 {
			if time.Now().After(deadline) {
				t.Fatalf("instance %d got %d normal answers in 10 s", i, l.normals[i].Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// calm waits until an answer that is not normal was seen after since, and
// calmFor went by with normal answers only; poll, if not nil, is called
// every 10 ms meanwhile. It reports false if that took longer than
// recoverWithin.
func (l *load) calm(since time.Time, poll func()) bool {
	for {
		now := time.Now()
		last := time.Unix(0, l.abnormal.Load())
		if last.After(since) && now.Sub(last) >= calmFor {
			return true
		}
		if now.Sub(since) > recoverWithin {
			return false
		}
		if poll != nil {
			poll()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// of returns the answers of mode's instances.
func of(answers []answer, mode failover.Mode) []answer {
	var out []answer
	for _, a := range answers {
		if a.mode == mode {
			out = append(out, a)
		}
	}
	return out
}

// outage is what the answers of one mode say of a failure.
type outage struct {
	first, last time.Time // the first and the last answer that was not normal
	recovered   time.Time // the first normal answer after first, of the later instance
	maxLatency  time.Duration
	counts      [3]int // answers after the failure, by kind
}

func (o outage) String() string {
	return fmt.Sprintf("outage seen %v, max latency %v, answers after the failure: %d normal, %d fallback, %d wrong",
		o.last.Sub(o.first).Round(time.Millisecond), o.maxLatency.Round(time.Millisecond),
		o.counts[normal], o.counts[fallback], o.counts[wrong])
}

// check checks answers, sorted by end, of a failure at down: those of the
// keys for which affected reports true must be normal until down, normal or
// as the mode says after it; those of the other keys must all be normal.
// Every call must end within its deadline. It returns what the affected
// keys saw.
func check(t *testing.T, answers []answer, down time.Time, affected func(key string) bool) outage {
	t.Helper()
	var o outage
	first := make(map[int]time.Time) // per instance, its first normal answer after o.first
	failures := 0
	fail := func(format string, args ...any) {
		t.Helper()
		if failures++; failures <= 5 {
			t.Errorf(format, args...)
		}
	}
	for _, a := range answers {
		took := a.end.Sub(a.start)
		o.maxLatency = max(o.maxLatency, took)
		if took > callTimeout+slack {
			fail("a call took %v, past its deadline %v and %v of slack: %v", took, callTimeout, slack, a)
		}
		switch {
		case !affected(a.key):
			if a.kind != normal {
				fail("a key of a healthy node, answered other than normally: %v", a)
			}
			continue
		case a.end.Before(down):
			if a.kind != normal {
				fail("before the failure, answered other than normally: %v", a)
			}
			continue
		case a.kind == wrong:
			fail("answered neither normally nor as its mode says: %v", a)
		}
		o.counts[a.kind]++
		switch {
		case a.kind != normal:
			if o.first.IsZero() {
				o.first = a.end
			}
			o.last = a.end
		case !o.first.IsZero() && a.start.After(o.first):
			if _, ok := first[a.inst]; !ok {
				first[a.inst] = a.end
			}
		}
	}
	for _, at := range first {
		if at.After(o.recovered) {
			o.recovered = at
		}
	}
	if failures > 5 {
		t.Errorf("... and %d more", failures-5)
	}
	return o
}
