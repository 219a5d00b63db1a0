package memorystore

import (
	"testing"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/storetest"
)

// TestGiveBacks runs storetest's tests of give-backs. Built with -tags
// wholerefund, a give-back credits its take's whole cost, and this test
// must fail.
func TestGiveBacks(t *testing.T) {
	storetest.RunGiveBacks(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		return newStore(t, &Options{Clock: now})
	})
}
