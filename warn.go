package ratelimit

import (
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"weak"
)

// Warner is an optional interface of an [Observer]: a Middleware tells it
// about each misconfiguration warning it logs, by kind, so that metrics can
// count them.
type Warner interface {
	Warn(kind string)
}

// The kinds of misconfiguration warning: the "warning" attribute of the
// log line, and what a [Warner] is told.
const (
	// WarnForwardedWithoutTrustedProxy: requests carry X-Forwarded-For or
	// Forwarded while KeyByIP trusts no proxy. (KeyByIP; QuietIP.)
	WarnForwardedWithoutTrustedProxy = "forwarded-without-trusted-proxy"
	// WarnWideTrustedRange: a trusted proxy range covers much of the
	// internet, such as 0.0.0.0/0. (KeyByIP; QuietIP.)
	WarnWideTrustedRange = "wide-trusted-range"
	// WarnOneKey: nearly all requests have the same key. (Middleware;
	// WithoutWarnings.)
	WarnOneKey = "one-key"
	// WarnSharedPolicyName: two limiters use one store and one policy name
	// with different limits. (Middleware; WithoutWarnings.)
	WarnSharedPolicyName = "shared-policy-name"
)

// quiet is the set of warning kinds turned off.
type quiet struct {
	all   bool
	kinds []string
}

func (q quiet) off(kind string) bool { return q.all || slices.Contains(q.kinds, kind) }

// newQuiet turns off kinds, or every kind when there is none; each must be
// one of valid.
func newQuiet(option string, kinds, valid []string) (quiet, error) {
	for _, k := range kinds {
		if !slices.Contains(valid, k) {
			return quiet{}, fmt.Errorf("ratelimit: %s: unknown warning %q; want one of %q", option, k, valid)
		}
	}
	return quiet{all: len(kinds) == 0, kinds: kinds}, nil
}

// warn logs a misconfiguration warning with slog.Default and tells w, if
// it is not nil.
func warn(w Warner, kind, msg string, args ...any) {
	slog.Default().Warn(msg, append([]any{"warning", kind}, args...)...)
	if w != nil {
		w.Warn(kind)
	}
}

// limitsByStore remembers the limit of every policy name used on each
// store, to warn when two limiters share a store and a name but not a
// limit: their buckets would mix. Stores are known by weak pointer, so the
// map keeps none of them alive and a new store at a collected one's address
// is a different store; a store's entries go when it does.
var limitsByStore sync.Map // storePolicy → Limit

type storePolicy struct {
	store weak.Pointer[byte]
	name  string
}

// checkSharedOnce runs checkShared the first time it sees l.
func (l *Limiter) checkSharedOnce(w Warner) {
	if !l.checked.Load() && l.checked.CompareAndSwap(false, true) {
		checkShared(l, w)
	}
}

// checkShared warns once for each policy of l whose name another limiter
// uses on the same store with a different limit. It knows stores that are
// pointers (all of this module's are).
func checkShared(l *Limiter, w Warner) {
	v := reflect.ValueOf(l.store)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return
	}
	ptr := (*byte)(v.UnsafePointer())
	store := weak.Make(ptr)
	for _, p := range l.policies {
		k := storePolicy{store, p.Name}
		prev, loaded := limitsByStore.LoadOrStore(k, p.Limit)
		if !loaded {
			runtime.AddCleanup(ptr, func(k storePolicy) { limitsByStore.Delete(k) }, k)
		}
		if loaded && prev.(Limit) != p.Limit {
			warn(w, WarnSharedPolicyName, "ratelimit: two limiters use one store and the policy name with different limits, so their buckets mix; give the policies different names",
				"policy", p.Name, "limit", p.Limit.String(), "other", prev.(Limit).String())
		}
	}
}

// dominance watches a sample of the keys a Middleware sees and warns once
// when nearly all of them are the same key: usually every client keyed by
// the address of a proxy.
type dominance struct {
	seen    atomic.Uint64
	warned  atomic.Bool
	mu      sync.Mutex
	counts  map[uint64]int
	sampled int
}

const (
	dominanceEvery   = 64  // sample one request in this many
	dominanceSamples = 256 // decide after this many samples
)

// see records a request's key; one request in 64 takes a lock.
func (d *dominance) see(key string, w Warner) {
	if d.seen.Add(1)%dominanceEvery != 0 || d.warned.Load() {
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
			warn(w, WarnOneKey, "ratelimit: nearly all requests have the same key, so one bucket limits everybody; check the key function (behind a proxy, see TrustedProxies)")
		}
	}
	clear(d.counts)
	d.sampled = 0
}
