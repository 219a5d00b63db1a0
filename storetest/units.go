package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

// testUnitsTogether: a BatchStore decides requests of different costs
// together, one per policy, each counting its own unit (requests, bytes,
// an application's tokens), all or nothing: one that does not fit spends
// nothing of the others, and each result is its own policy's, of its own
// cost. The key has a hash tag, so that a Cluster keeps its buckets on
// one node.
func testUnitsTogether(t *testing.T, c *Clock, s ratelimit.Store) {
	bs, ok := s.(ratelimit.BatchStore)
	if !ok {
		t.Skip("not a ratelimit.BatchStore")
	}
	requests := policy("requests", ratelimit.PerSecond(10))
	bytes := policy("bytes", ratelimit.Per(1000, time.Second))  // a byte every ms
	tokens := policy("tokens", ratelimit.Daily(5000, time.UTC)) // an application's unit
	c.Advance(10 * time.Hour)
	const key = "{u1}"
	batch := func(nRequests, nBytes, nTokens int64) []ratelimit.Result {
		t.Helper()
		reqs := []ratelimit.BatchItem{{Policy: requests, Key: key, Cost: nRequests}, {Policy: bytes, Key: key, Cost: nBytes}, {Policy: tokens, Key: key, Cost: nTokens}}
		results := make([]ratelimit.Result, len(reqs))
		err := bs.TakeAll(context.Background(), reqs, results)
		if errors.Is(err, errors.ErrUnsupported) {
			t.Skip("TakeAll answers errors.ErrUnsupported")
		}
		require.NoError(t, err, "TakeAll(%d requests, %d bytes, %d tokens)", nRequests, nBytes, nTokens)
		return results
	}
	left := func(r []ratelimit.Result) [3]int64 { return [3]int64{r[0].Remaining, r[1].Remaining, r[2].Remaining} }
	allowed := func(r []ratelimit.Result) [3]bool { return [3]bool{r[0].Allowed, r[1].Allowed, r[2].Allowed} }

	r := batch(1, 600, 3000)
	assert.Equal(t, [3]bool{true, true, true}, allowed(r))
	assert.Equal(t, [3]int64{9, 400, 2000}, left(r), "each policy spent its own cost")

	r = batch(1, 600, 1000)
	assert.Equal(t, [3]bool{true, false, true}, allowed(r), "600 bytes do not fit in 400")
	assert.Equal(t, 200*ms, r[1].RetryAfter, "200 bytes at a byte a millisecond")
	assert.Equal(t, [3]int64{9, 400, 2000}, left(batch(0, 0, 0)), "the refused batch spent nothing")

	c.Advance(200 * ms)
	r = batch(1, 600, 2000)
	assert.Equal(t, [3]bool{true, true, true}, allowed(r))
	assert.Equal(t, [3]int64{9, 0, 0}, left(r), "two requests' worth earned back; the bytes and the day's tokens spent")
	r = batch(1, 0, 1)
	assert.Equal(t, [3]bool{true, true, false}, allowed(r), "the day's tokens spent")
	assert.Equal(t, 14*time.Hour-200*ms, r[2].RetryAfter, "until midnight")
}
