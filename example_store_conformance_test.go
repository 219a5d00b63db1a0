package ratelimit_test

import (
	"testing"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/storetest"
)

// TestExampleStoreConformance runs the conformance suite against the store
// of ExampleStore. It lives in its own file so that the documentation shows
// example_store_test.go whole, store type included.
func TestExampleStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) ratelimit.Store {
		return newMapStore(now)
	})
}
