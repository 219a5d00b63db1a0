package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tokenfair/ratelimit/internal/algo"
	"github.com/tokenfair/ratelimit/internal/refusers"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

// A gate is a store through which, once armed for n, the next n decisions
// that ask whether a key is banned wait for each other before they
// answer: n requests all find the key not banned, and are all refused,
// before any of them strikes. It is the race of a burst of refusals, made
// certain whatever the store's latency.
type gate struct {
	ratelimit.Store
	mu   sync.Mutex
	left int           // decisions still to hold
	open chan struct{} // closed when the last of them arrives
}

// arm makes the next n decisions that ask for a ban wait for each other.
func (g *gate) arm(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.left, g.open = n, make(chan struct{})
}

// pass holds a decision that asked for a ban until the gate opens.
func (g *gate) pass() {
	g.mu.Lock()
	if g.left == 0 {
		g.mu.Unlock()
		return
	}
	open := g.open
	if g.left--; g.left == 0 {
		close(open)
	}
	g.mu.Unlock()
	select {
	case <-open:
	case <-time.After(10 * time.Second): // a request that never came: the test fails, not hangs
	}
}

func asksBan(r ratelimit.BatchItem) bool { return r.Policy.Algorithm == algo.Ban && r.Cost == 0 }

func (g *gate) Take(ctx context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	res, err := g.Store.Take(ctx, p, key, cost)
	if asksBan(ratelimit.BatchItem{Policy: p, Key: key, Cost: cost}) {
		g.pass()
	}
	return res, err
}

func (g *gate) TakeAll(ctx context.Context, reqs []ratelimit.BatchItem, results []ratelimit.Result) error {
	bs, ok := g.Store.(ratelimit.BatchStore)
	if !ok {
		return errors.ErrUnsupported
	}
	err := bs.TakeAll(ctx, reqs, results)
	if errors.Is(err, errors.ErrUnsupported) {
		return err
	}
	for _, r := range reqs {
		if asksBan(r) {
			g.pass()
			break
		}
	}
	return err
}

// burst sends n requests of key at once through l, whose store is g, and
// returns their answers.
func burst(t *testing.T, g *gate, l *ratelimit.Limiter, key string, n int) []ratelimit.Result {
	t.Helper()
	g.arm(n)
	answers := make([]ratelimit.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], errs[i] = l.Take(context.Background(), key, 1)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err, "Take(%q, 1)", key)
	}
	return answers
}

// testPenaltyBurstBansFor: 32 refusals at once, each of which found the
// key not banned, ban it once, for For: not For doubled for each refusal
// that raced the ban (which made it Max, 64 minutes). Every one of them
// is answered with that ban.
func testPenaltyBurstBansFor(t *testing.T, c *Clock, s ratelimit.Store) {
	g := &gate{Store: s}
	l := limiter(t, g, ratelimit.Policy{Name: "login", Limit: ratelimit.Per(1, 24*time.Hour),
		Penalty: ratelimit.Penalty{After: 1, For: time.Minute, Max: 64 * time.Minute}})
	require.True(t, limit(t, l, "k", 1).Allowed)
	answers := map[string]int{} // the answers' policies and RetryAfters
	for _, res := range burst(t, g, l, "k", 32) {
		answers[fmt.Sprint(refusers.Names(res, false), " ", res.RetryAfter)]++
	}
	assert.Equal(t, map[string]int{"[login/ban] 1m0s": 32}, answers, "the answers of a burst of 32")
	assert.Equal(t, time.Minute, refusal(t, l, "k", "login/ban"), "the first ban lasts For")
	c.Advance(time.Minute)
	assert.Equal(t, 2*time.Minute, refusal(t, l, "k", "login/ban"), "the burst counted one ban toward the back-off")
}

// testPenaltyBurstBackOff: a key banned again by a burst of 16 refusals as
// soon as each ban ends is banned 1, 2, 4, then 5 minutes (the cap) and 5
// again, as one client's refusals one at a time are (PenaltyBackOff); of
// each burst, one refusal takes the one strike and the others are
// answered with the ban; after a long quiet spell, 1 minute again.
func testPenaltyBurstBackOff(t *testing.T, c *Clock, s ratelimit.Store) {
	g := &gate{Store: s}
	l := limiter(t, g, ratelimit.Policy{Name: "login", Limit: ratelimit.Per(1, 24*time.Hour),
		Penalty: ratelimit.Penalty{After: 2, Within: 10 * time.Second, For: time.Minute, Max: 5 * time.Minute}})
	require.True(t, limit(t, l, "k", 1).Allowed)
	var bans []time.Duration
	for round := range 6 {
		answers := map[string]int{} // the answers' policies, and the bans' RetryAfters
		for _, res := range burst(t, g, l, "k", 16) {
			if a := fmt.Sprint(refusers.Names(res, false)); a == "[login/ban]" {
				answers[fmt.Sprint(a, " ", res.RetryAfter)]++
			} else {
				answers[a]++
			}
		}
		ban := refusal(t, l, "k", "login/ban")
		assert.Equal(t, map[string]int{"[login]": 1, fmt.Sprint("[login/ban] ", ban): 15}, answers,
			"round %d: one refusal takes the strike, the others are answered with the ban", round)
		bans = append(bans, ban)
		c.Advance(ban)
	}
	t.Logf("bans of 6 bursts of 16: %v", bans)
	assert.Equal(t, []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute}, bans)
	c.Advance(4 * 10 * time.Minute)
	refusal(t, l, "k", "login")
	assert.Equal(t, time.Minute, refusal(t, l, "k", "login/ban"), "every ban forgotten")
}
