package credit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/tokenfair/ratelimit"
)

func TestRefund(t *testing.T) {
	const now = int64(1e18)
	p := &ratelimit.Policy{Name: "p", Limit: ratelimit.Per(10, 1000)} // a token every 100 ns
	for _, tc := range []struct {
		name               string
		state, cost, until int64
		bucket             Bucket
		next, nextCredit   int64
	}{
		{name: "all owed", state: now + 600, cost: 2, until: now + 600, next: now + 400, nextCredit: 200},
		{name: "the credit then is in until", state: now + 600, bucket: Bucket{Credit: 50}, cost: 2, until: now + 650, next: now + 400, nextCredit: 250},
		{name: "given back since: moved earlier", state: now + 600, bucket: Bucket{Credit: 300}, cost: 5, until: now + 650, next: now + 250, nextCredit: 650},
		{name: "given back since, of a later take: not counted", state: now + 600, cost: 5, until: now + 650,
			bucket: Bucket{Credit: 300, until: [n]int64{now + 900}, give: [n]int64{300}}, next: now + 100, nextCredit: 800},
		{name: "full: the credit shrinks", state: now - 5, bucket: Bucket{Credit: 30}, cost: 1, until: now + 100, next: now, nextCredit: 25},
		{name: "full: not below 0", state: now - 50, bucket: Bucket{Credit: 30}, cost: 1, until: now + 100, next: now, nextCredit: 0},
		{name: "earned back", state: now + 600, bucket: Bucket{Credit: 100}, cost: 2, until: now + 100, next: now + 600, nextCredit: 100},
	} {
		b := tc.bucket
		next := b.Refund(p, tc.state, now, tc.cost, tc.until)
		assert.Equal(t, [2]int64{tc.next, tc.nextCredit}, [2]int64{next, b.Credit}, tc.name)
	}
}

func TestRememberMergesTheClosest(t *testing.T) {
	const now = int64(1e18)
	var b Bucket
	for i := range int64(n + 2) {
		b.remember(now+100*(i+1), 10, now)
	}
	assert.Equal(t, int64(10*(n+2)), b.later(now), "every give-back kept, two pairs as one")
	assert.Equal(t, int64(20), b.later(now+100*n+50), "the last two, exactly")
	assert.Equal(t, int64(10*n), b.later(now+150), "of the n+1 after now+150, the first kept with its neighbour before it: less, never more")
	b.remember(now+100*(n+5), 5, now+100*n+50) // the takes whose Until has passed go first
	assert.Equal(t, int64(25), b.later(now+100*n+50))
}

// Takes of one frozen instant given back last first or first first, more
// than n of them, get back all they ask: the takes after each stay
// counted.
func TestRefundManyOverlapping(t *testing.T) {
	const now, iv, k = int64(1e18), int64(100), int64(n + 2)
	p := &ratelimit.Policy{Name: "p", Limit: ratelimit.Per(10*k, time.Duration(10*k*iv))}
	orders := [][]int64{make([]int64, k), make([]int64, k)}
	for i := range k {
		orders[0][i], orders[1][i] = k-i, i+1 // last first, first first
	}
	for _, order := range orders {
		var b Bucket
		state := now + 10*k*iv // k takes of 10, Untils now+10iv … now+10k·iv
		for _, j := range order {
			state = b.Refund(p, state, now, 9, now+10*j*iv)
		}
		assert.Equal(t, now+k*iv, state, "given back in the order %v", order)
	}
}

func TestFullBucketForgetsTheTakes(t *testing.T) {
	const now = int64(1e18)
	p := &ratelimit.Policy{Name: "p", Limit: ratelimit.Per(10, 1000)}
	b := Bucket{Credit: 500, until: [n]int64{now + 900}, give: [n]int64{300}}
	assert.Equal(t, now, b.Refund(p, now-10, now, 1, now+50))
	assert.Equal(t, Bucket{Credit: 490}, b, "the takes it held get nothing back, and later ones may have smaller untils")
}

func TestReset(t *testing.T) {
	const now = int64(1e18)
	b := Bucket{Credit: 100, until: [n]int64{now + 900}, give: [n]int64{50}}
	assert.Equal(t, now, b.Reset(now+600, now))
	assert.Equal(t, Bucket{Credit: 700}, b, "what it owed becomes credit; the takes before get nothing back")
	b = Bucket{Credit: 100}
	b.Reset(now-30, now)
	assert.Equal(t, Bucket{Credit: 70}, b, "full for 30 ns")
}
