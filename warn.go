package ratelimit

import (
	"log/slog"
	"reflect"
	"runtime"
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
			warn(w, "shared-policy-name", "ratelimit: two limiters use one store and the policy name with different limits, so their buckets mix; give the policies different names",
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
			warn(w, "one-key", "ratelimit: nearly all requests have the same key, so one bucket limits everybody; check the key function (behind a proxy, see TrustedProxies)")
		}
	}
	clear(d.counts)
	d.sampled = 0
}
