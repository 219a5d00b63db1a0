package ratelimit

import (
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// The kinds of misconfiguration warning: the "warning" attribute of the
// log line.
const (
	warnForwardedWithoutTrustedProxy = "forwarded-without-trusted-proxy"
	warnWideTrustedRange             = "wide-trusted-range"
	warnOneKey                       = "one-key"
	warnSharedPolicyName             = "shared-policy-name"
)

// warn logs a misconfiguration warning of kind to l, or to slog.Default()
// when l is nil.
func warn(l *slog.Logger, kind, msg string, args ...any) {
	if l == nil {
		l = slog.Default()
	}
	l.Warn(msg, append([]any{"warning", kind}, args...)...)
}

// limitsSeen remembers the limiters of a Middleware, to warn when two of
// them that share a store give one policy name two limits: their buckets
// would mix.
type limitsSeen struct {
	checked sync.Map // *Limiter → struct{}: limiters already compared
	n       atomic.Int32
	mu      sync.Mutex
	seen    []*Limiter
}

// maxLimitersSeen bounds the limiters a Middleware compares, in case
// LimiterFor makes new ones as it goes.
const maxLimitersSeen = 64

// note compares l's policies with those of the limiters seen before, the
// first time it sees l. It costs one read of a sync.Map afterwards.
func (s *limitsSeen) note(l *Limiter, log *slog.Logger) {
	if _, ok := s.checked.Load(l); ok {
		return
	}
	if s.n.Load() >= maxLimitersSeen {
		return
	}
	if _, loaded := s.checked.LoadOrStore(l, struct{}{}); loaded || s.n.Add(1) > maxLimitersSeen {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	warned := map[string]bool{}
	for _, prev := range s.seen {
		for _, mix := range l.mixes(prev) {
			if p := mix[0]; !warned[p.Name] {
				warned[p.Name] = true
				warn(log, warnSharedPolicyName, "ratelimit: two limiters use one store and one policy name with different limits, so their buckets mix; give the policies different names",
					"policy", p.Name, "limit", p.Limit.String(), "other", mix[1].Limit.String())
			}
		}
	}
	s.seen = append(s.seen, l)
}

// dominance watches a sample of the keys a Middleware sees and warns once
// when nearly all of them are the same key: usually every client keyed by
// the address of a proxy. Sampling draws from math/rand/v2's per-thread
// generator, so an unsampled request writes no shared memory.
type dominance struct {
	warned  atomic.Bool
	mu      sync.Mutex
	counts  map[uint64]int
	sampled int
}

const (
	dominanceEvery   = 64  // sample one request in this many, on average
	dominanceSamples = 256 // decide after this many samples
)

// see records a request's key, one request in 64.
func (d *dominance) see(key string, log *slog.Logger) {
	if rand.Uint64()%dominanceEvery != 0 || d.warned.Load() {
		return
	}
	h := keyHash(key)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counts == nil {
		d.counts = map[uint64]int{}
	}
	if _, ok := d.counts[h]; ok || len(d.counts) < 16 {
		d.counts[h]++
	}
	if d.sampled++; d.sampled < dominanceSamples {
		return
	}
	for _, n := range d.counts {
		if n*10 >= d.sampled*9 && d.warned.CompareAndSwap(false, true) {
			warn(log, warnOneKey, "ratelimit: nearly all requests have the same key, so one bucket limits everybody; check the key function (behind a proxy, see IPOptions.TrustedProxies)")
		}
	}
	clear(d.counts)
	d.sampled = 0
}

// mixes returns the pairs of a policy of l and one of o, in the same store,
// that have one name and different limits: their buckets mix.
func (l *Limiter) mixes(o *Limiter) (pairs [][2]Policy) {
	if !sameStore(l.store, o.store) {
		return nil
	}
	for _, p := range l.policies {
		for _, q := range o.policies {
			if p.Name == q.Name && p.Limit.differs(q.Limit) {
				pairs = append(pairs, [2]Policy{p, q})
			}
		}
	}
	return pairs
}

// differs reports whether buckets of l and m under one name would mix: a
// different interval or burst, or for a quota a different period or zone
// (a zone by its name: one loaded twice is one zone).
func (l Limit) differs(m Limit) bool {
	return l.interval != m.interval || l.burst != m.burst || l.cal != m.cal ||
		l.cal != rate && l.loc.String() != m.loc.String()
}

// sameStore reports whether a and b are one store; stores of a dynamic
// type that cannot be compared, such as a func adapter, are never one.
func sameStore(a, b Store) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}
