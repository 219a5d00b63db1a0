package fakeclock

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestClock(t *testing.T) {
	var c Clock
	assert.Equal(t, Epoch, c.Now(), "the zero value")
	c.Advance(time.Hour + 1)
	c.Advance(-time.Minute)
	assert.Equal(t, Epoch.Add(59*time.Minute+1), c.Now())
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.Advance(time.Nanosecond)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, Epoch.Add(59*time.Minute+8001), c.Now(), "concurrent advances all count")
}
