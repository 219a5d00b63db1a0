package ratelimit

import (
	"maps"
	"sync"
	"sync/atomic"
)

// cowMap is a map that the request path reads without a lock or an
// allocation, and that grows under a lock by being copied whole, up to a
// bound: for values made once and shared, few enough that a copy is cheap.
// The zero cowMap is empty.
type cowMap[K comparable, V any] struct {
	mu sync.Mutex // held to add
	m  atomic.Pointer[map[K]V]
}

// get returns the value kept for k, and whether there is one.
func (c *cowMap[K, V]) get(k K) (v V, ok bool) {
	if m := c.m.Load(); m != nil {
		v, ok = (*m)[k]
	}
	return v, ok
}

// full reports whether c holds most entries.
func (c *cowMap[K, V]) full(most int) bool {
	m := c.m.Load()
	return m != nil && len(*m) >= most
}

// add keeps v for k, unless c holds a value for k already or most entries,
// and returns the value kept for k: the earlier one, or v (not kept when
// c is full: made again each time, correct, only slower).
func (c *cowMap[K, V]) add(k K, v V, most int) V {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if prev, ok := (*old)[k]; ok {
			return prev
		}
		if len(*old) >= most {
			return v
		}
	}
	m := make(map[K]V, 1)
	if old != nil {
		maps.Copy(m, *old)
	}
	m[k] = v
	c.m.Store(&m)
	return v
}
