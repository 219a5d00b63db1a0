package ratelimit

import (
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A cowMap keeps the first value added for a key, up to its bound; past
// the bound it keeps nothing new and hands back the value it was given.
func TestCowMap(t *testing.T) {
	var c cowMap[string, *int]
	_, ok := c.get("a")
	assert.False(t, ok, "the zero cowMap is empty")
	assert.False(t, c.full(1))

	one, two, three := new(int), new(int), new(int)
	assert.Same(t, one, c.add("a", one, 2))
	assert.Same(t, one, c.add("a", two, 2), "the first value stays")
	v, ok := c.get("a")
	require.True(t, ok)
	assert.Same(t, one, v)

	assert.Same(t, two, c.add("b", two, 2))
	assert.True(t, c.full(2))
	assert.Same(t, three, c.add("c", three, 2), "past the bound: handed back")
	_, ok = c.get("c")
	assert.False(t, ok, "and not kept")
	assert.Same(t, one, c.add("a", three, 2), "a kept key is still found when full")
}

// Concurrent adds of one key agree on one value, and readers never see a
// map being written (the race detector would say).
func TestCowMapConcurrent(t *testing.T) {
	var c cowMap[int, string]
	var wg sync.WaitGroup
	got := make([]string, 8)
	for g := range 8 {
		wg.Go(func() {
			for k := range 50 {
				v := c.add(k, strconv.Itoa(g), 100)
				if k == 7 {
					got[g] = v
				}
				c.get(k - 1)
			}
		})
	}
	wg.Wait()
	for _, v := range got {
		assert.Equal(t, got[0], v, "one value for key 7")
	}
	assert.False(t, c.full(51))
	assert.True(t, c.full(50))
}
