package ratelimit

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// recent finds what it was given, by key and hash; a key whose two slots
// are taken by others evicts one of them, never returns another key's
// value.
func TestRecent(t *testing.T) {
	c := new(recent[string, int])
	_, ok := c.get("a", 1)
	assert.False(t, ok, "empty")
	c.put("a", 1, 10)
	v, ok := c.get("a", 1)
	assert.True(t, ok)
	assert.Equal(t, 10, v)
	_, ok = c.get("b", 1)
	assert.False(t, ok, "another key of the same hash is no hit")

	// Three keys for the same two slots: the third evicts one, and each
	// get answers its own key's value or a miss.
	c.put("b", 1, 20)
	c.put("c", 1, 30)
	hits := 0
	for k, want := range map[string]int{"a": 10, "b": 20, "c": 30} {
		if v, ok := c.get(k, 1); ok {
			assert.Equal(t, want, v, "key %s", k)
			hits++
		}
	}
	assert.Equal(t, 2, hits, "two slots, two entries")
	v, ok = c.get("c", 1)
	assert.True(t, ok, "the latest is kept")
	assert.Equal(t, 30, v)
}

// Racing puts and gets answer a key's own value or a miss, never
// another's.
func TestRecentConcurrent(t *testing.T) {
	c := new(recent[int, int])
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				k := (i + g) % 64
				h := uint64(k % 8) // many keys per pair of slots
				c.put(k, h, k*10)
				if v, ok := c.get(k, h); ok && v != k*10 {
					t.Errorf("key %d: value %d", k, v)
				}
			}
		})
	}
	wg.Wait()
}
