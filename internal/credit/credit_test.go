package credit

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/tokenfair/ratelimit"
)

func TestRefund(t *testing.T) {
	const now = int64(1e18)
	p := &ratelimit.Policy{Name: "p", Limit: ratelimit.Per(10, 1000)} // a token every 100 ns
	for _, tc := range []struct {
		name                       string
		state, credit, cost, until int64
		later                      Later
		next, nextCredit           int64
	}{
		{name: "all owed", state: now + 600, cost: 2, until: now + 600, next: now + 400, nextCredit: 200},
		{name: "the credit then is in until", state: now + 600, credit: 50, cost: 2, until: now + 650, next: now + 400, nextCredit: 250},
		{name: "given back since: moved earlier", state: now + 600, credit: 300, cost: 5, until: now + 650, next: now + 250, nextCredit: 650},
		{name: "given back since, of a later take: not counted", state: now + 600, credit: 300, cost: 5, until: now + 650,
			later: Later{until: [n]int64{now + 900}, give: [n]int64{300}}, next: now + 100, nextCredit: 800},
		{name: "full: the credit shrinks", state: now - 5, credit: 30, cost: 1, until: now + 100, next: now, nextCredit: 25},
		{name: "full: not below 0", state: now - 50, credit: 30, cost: 1, until: now + 100, next: now, nextCredit: 0},
		{name: "earned back", state: now + 600, credit: 100, cost: 2, until: now + 100, next: now + 600, nextCredit: 100},
	} {
		l := tc.later
		next, c := Refund(p, tc.state, tc.credit, &l, now, tc.cost, tc.until)
		assert.Equal(t, [2]int64{tc.next, tc.nextCredit}, [2]int64{next, c}, tc.name)
	}
}

func TestLaterKeepsTheLatest(t *testing.T) {
	const now = int64(1e18)
	var l Later
	for i := range int64(6) {
		l.add(now+100*(i+1), 10, now)
	}
	assert.Equal(t, int64(40), l.since(now), "four kept")
	assert.Equal(t, int64(20), l.since(now+450), "the latest two after now+450")
	l.add(now+1000, 5, now+550) // the takes whose Until has passed go first
	assert.Equal(t, int64(15), l.since(now+550))
}

func TestReset(t *testing.T) {
	const now = int64(1e18)
	next, c := Reset(now+600, 100, now)
	assert.Equal(t, [2]int64{now, 700}, [2]int64{next, c}, "what it owed becomes credit")
	next, c = Reset(now-30, 100, now)
	assert.Equal(t, [2]int64{now, 70}, [2]int64{next, c}, "full for 30 ns")
}

func TestFullBucketForgetsLater(t *testing.T) {
	const now = int64(1e18)
	p := &ratelimit.Policy{Name: "p", Limit: ratelimit.Per(10, 1000)}
	l := Later{until: [n]int64{now + 900}, give: [n]int64{300}}
	next, c := Refund(p, now-10, 500, &l, now, 1, now+50)
	assert.Equal(t, [2]int64{now, 490}, [2]int64{next, c})
	assert.Equal(t, Later{}, l, "the takes it held get nothing back, and later ones may have smaller untils")
}
