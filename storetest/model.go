package storetest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

// The model test: every path that moves tokens, mixed at random, against
// an exact model of one bucket per policy, written from the rules of
// docs/algorithms.md rather than from the code. A new feature that moves
// tokens joins it.
//
// Requests go through a Middleware (ResultInContext, CountIf) of three
// policies in two units: "rate", a token bucket of requests whose limit
// each key takes from a table (Policy.LimitFor) that the test changes, up
// and down; "daily", a calendar quota of tokens (MiddlewareOptions.Costs)
// whose count the table gives too; and "global", one bucket of requests
// for every key, whose refusals make the other policies give back what
// they took. A request reserves its own cost in each unit, is held open
// by its handler, and finishes at once or later: each unit counted as it
// reserved, or settled (ratelimit.Settle) at a cost below, equal to or
// above its reservation, 0 and costs near the int64 limit included; a 500
// that CountIf does not count gives back the units not settled. Between requests the clock moves (across
// midnights too), keys are reset, their limits change, and the service is
// redeployed with its daily quota in another time zone.
//
// Two checks:
//   - Exact decisions: while a bucket's state is known exactly (no give-back
//     of a request held open has come since it was full, reset or new), each
//     policy's decision (allowed, remaining, retry, reset) is the model's;
//     otherwise the store's bucket is between the exact bucket and one that
//     got nothing back, and a refusal must be one that bound refuses too.
//   - No way past the limit: at the end, the requests that count, at their
//     settled costs (at least 1) and times, the charges past empty, the
//     resets and the limits in force, are a history that one exact bucket
//     per policy admits: every counted request fits when it was taken.
//
// modelChecks returns the test, with the exact decisions checked or not
// (a store that leases tokens decides ahead of the model).
func modelChecks(exact bool) func(*testing.T, *Clock, ratelimit.Store) {
	return func(t *testing.T, c *Clock, s ratelimit.Store) {
		decisions := 0
		for seed := range uint64(6) {
			m := newModel(t, c, s, seed, exact)
			decisions += m.run(250)
		}
		t.Logf("%d decisions checked", decisions)
	}
}

// The limits the table gives a key.
var (
	modelRates  = []ratelimit.Limit{ratelimit.PerSecond(4).WithBurst(6), ratelimit.Per(1, 2*time.Second).WithBurst(3), ratelimit.Per(10, time.Minute), ratelimit.PerSecond(50).WithBurst(8)}
	modelQuotas = []int64{5, 12, 30}
	modelZones  = []string{"Asia/Tokyo", "Europe/Paris"}
	modelSteps  = []time.Duration{0, 0, 1, 100 * ms, 250 * ms, time.Second, 7 * time.Second, time.Minute, time.Hour, 7 * time.Hour}
	modelKeys   = []string{"a", "b", "c"}
)

// plan is a key's limits in the table.
type plan struct {
	rate  ratelimit.Limit
	quota int64
}

// deployment is one version of the service: a Middleware whose daily
// quota is in one time zone.
type deployment struct {
	loc *time.Location
	lim *ratelimit.Limiter
	mw  *ratelimit.Middleware
}

// modelRun is one run of the model test: one seed.
type modelRun struct {
	t     *testing.T
	c     *Clock
	rng   *rand.Rand
	exact bool
	reset ratelimit.ResetStore // nil: the store cannot reset

	names   [3]string // of the policies: a run's own, so that runs on one store never share a bucket
	mu      sync.Mutex
	plans   map[string]plan // by key; read by LimitFor in the handlers' goroutines
	deploys []*deployment
	current int                 // the deployment in force
	event   ratelimit.Event     // the last decision observed
	buckets map[string]*mBucket // by policy name and bucket key
	open    []*mRequest
	errs    int
}

// mBucket is the model of one bucket.
type mBucket struct {
	upper int64 // the state, with only the give-backs that came at once: the store's at most
	exact bool  // the store's state is upper
	// lossy: reset while in a debt near the int64 limit, the bucket keeps
	// a credit so large that a take's Until saturates, and a give-back,
	// even at once, may credit less than the take cost (never more).
	lossy bool
	log   []*mEvent
}

// mEvent is one entry of a bucket's history: a take, counted for cost (0:
// not counted), a charge past empty of cost, or a reset.
type mEvent struct {
	at     int64
	limit  ratelimit.Limit
	cost   int64
	charge bool
	reset  bool
	what   string
}

// mRequest is a request admitted and held open by its handler.
type mRequest struct {
	key      string
	cost     [3]int64 // under each policy: its unit's
	at       int64
	d        *deployment
	res      ratelimit.Result
	takes    []*mEvent // in each policy's bucket
	buckets  []*mBucket
	finish   chan mFinish
	done     chan error    // Settle's error, once the handler returned
	returned chan struct{} // closed once Handle returned: the request is settled
}

// mFinish is how a request finishes: with its status (500 does not
// count), each unit (requests, tokens) settled at cost first if settle.
type mFinish struct {
	status int
	settle [2]bool
	cost   [2]int64
}

// modelUnits are the units of the model's policies, and unitOf the index
// in it of each policy's.
var (
	modelUnits = [2]string{"requests", "tokens"}
	unitOf     = [3]int{0, 1, 0}
)

func newModel(t *testing.T, c *Clock, s ratelimit.Store, seed uint64, exact bool) *modelRun {
	m := &modelRun{t: t, c: c, rng: rand.New(rand.NewPCG(seed, 35)), exact: exact,
		plans: map[string]plan{}, buckets: map[string]*mBucket{}}
	m.reset, _ = s.(ratelimit.ResetStore)
	for i, name := range []string{"rate", "daily", "global"} {
		m.names[i] = fmt.Sprint(name, seed)
	}
	for _, name := range modelZones {
		loc := zone(t, name)
		lim, err := ratelimit.New(s,
			ratelimit.Policy{Name: m.names[0], Limit: modelRates[0], LimitFor: m.rateFor},
			ratelimit.Policy{Name: m.names[1], Limit: ratelimit.Daily(modelQuotas[0], loc), Unit: "tokens", LimitFor: func(key string) (ratelimit.Limit, bool) {
				return ratelimit.Daily(m.plan(key).quota, loc), true
			}},
			ratelimit.Policy{Name: m.names[2], Limit: ratelimit.Per(20, time.Second).WithBurst(10), Global: true},
		)
		require.NoError(t, err)
		mw, err := ratelimit.NewMiddleware(lim, func(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil },
			&ratelimit.MiddlewareOptions{
				ResultInContext: true,
				Headers:         ratelimit.HeadersNone,
				Cost:            func(r *http.Request) (int64, error) { return strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64) },
				Costs: map[string]func(*http.Request) (int64, error){
					"tokens": func(r *http.Request) (int64, error) { return strconv.ParseInt(r.Header.Get("X-Tokens"), 10, 64) },
				},
				CountIf: func(status int) bool { return status < 500 },
				Observe: func(_ *http.Request, ev ratelimit.Event) { m.event = ev },
			})
		require.NoError(t, err)
		m.deploys = append(m.deploys, &deployment{loc: loc, lim: lim, mw: mw})
	}
	return m
}

// plan returns key's plan, the first limits of each list for a new key.
func (m *modelRun) plan(key string) plan {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.plans[key]
	if !ok {
		p = plan{rate: modelRates[0], quota: modelQuotas[0]}
	}
	return p
}

func (m *modelRun) rateFor(key string) (ratelimit.Limit, bool) { return m.plan(key).rate, true }

// limit returns the limit in force for key under the i-th policy of d.
func (m *modelRun) limit(d *deployment, i int, key string) ratelimit.Limit {
	switch i {
	case 0:
		return m.plan(key).rate
	case 1:
		return ratelimit.Daily(m.plan(key).quota, d.loc)
	}
	return d.lim.Policies()[2].Limit
}

// bucket returns the model of the bucket of key under the i-th policy.
func (m *modelRun) bucket(i int, key string) *mBucket {
	name := m.names[i]
	if i == 2 {
		key = "*"
	}
	b := m.buckets[name+"/"+key]
	if b == nil {
		b = &mBucket{exact: true}
		m.buckets[name+"/"+key] = b
	}
	return b
}

// run runs n steps and returns the decisions it checked.
func (m *modelRun) run(n int) (decisions int) {
	for range n {
		m.c.Advance(modelSteps[m.rng.IntN(len(modelSteps))])
		key := modelKeys[m.rng.IntN(len(modelKeys))]
		switch r := m.rng.IntN(100); {
		case r < 55:
			q := m.start(key, 1+m.rng.Int64N(3), 1+m.rng.Int64N(4))
			decisions++
			if q != nil && m.rng.IntN(2) == 0 {
				m.finish(q, true) // at once
			}
		case r < 80 && len(m.open) > 0:
			i := m.rng.IntN(len(m.open))
			q := m.open[i]
			m.open = append(m.open[:i], m.open[i+1:]...)
			m.finish(q, false) // later
		case r < 88:
			m.mu.Lock()
			m.plans[key] = plan{rate: modelRates[m.rng.IntN(len(modelRates))], quota: modelQuotas[m.rng.IntN(len(modelQuotas))]}
			m.mu.Unlock()
		case r < 92 && m.reset != nil:
			m.resetKey(key)
		case r < 94:
			m.current = 1 - m.current // redeployed, the daily quota in the other zone
		}
	}
	for len(m.open) > 0 {
		q := m.open[0]
		m.open = m.open[1:]
		m.finish(q, false)
	}
	m.checkHistory()
	return decisions
}

// start sends a request of key reserving cost requests and tokens tokens
// through the deployment in force, checks each policy's decision, and
// returns the request if it was admitted (held open by its handler) or
// nil.
func (m *modelRun) start(key string, cost, tokens int64) *mRequest {
	d := m.deploys[m.current]
	now := m.c.Now().UnixNano()
	q := &mRequest{key: key, cost: [3]int64{cost, tokens, cost}, at: now, d: d, finish: make(chan mFinish), done: make(chan error, 1)}
	admitted := make(chan struct{})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Key", key)
	r.Header.Set("X-Cost", strconv.FormatInt(cost, 10))
	r.Header.Set("X-Tokens", strconv.FormatInt(tokens, 10))
	returned := make(chan struct{})
	q.returned = returned
	go func() {
		defer close(returned)
		d.mw.Handle(httptest.NewRecorder(), r, func(r *http.Request) (int, int64) {
			close(admitted)
			f := <-q.finish
			var err error
			for u, settle := range f.settle {
				if settle && err == nil {
					err = ratelimit.Settle(r.Context(), modelUnits[u], f.cost[u])
				}
			}
			q.done <- err
			return f.status, 0
		})
	}()
	select {
	case <-admitted:
	case <-returned:
	}
	ev := m.event
	require.NoError(m.t, ev.Err, "Take(%q, %d, %d tokens)", key, cost, tokens)
	q.res = ev.Result
	require.Len(m.t, q.res.Results, 3, "Take(%q, %d, %d tokens): a result per policy", key, cost, tokens)

	// Each policy decides on its bucket at now; the request is admitted
	// only if all allow, and then each bucket takes its unit's cost.
	type want struct {
		allowed                 bool
		remaining, retry, reset int64
		next                    int64
		exact                   bool
	}
	var wants [3]want
	all := true
	for i := range 3 {
		b, l := m.bucket(i, key), m.limit(d, i, key)
		if !b.exact && b.upper <= periodAt(l, now) {
			b.upper, b.exact = 0, true // full, whatever was given back
		}
		w := &wants[i]
		w.allowed, w.remaining, w.retry, w.reset, w.next = decide(l, b.upper, now, q.cost[i])
		w.exact = b.exact
		all = all && w.allowed
	}
	for i, got := range q.res.Results {
		w, what := wants[i], fmt.Sprintf("%s: Take(%q, %d) under %v at %v", got.Policy.Name, key, q.cost[i], got.Policy.Limit, time.Unix(0, now).UTC())
		g := [4]int64{b2i(got.Allowed), got.Remaining, int64(got.RetryAfter), int64(got.ResetAfter)}
		switch {
		case !m.exact:
		case w.exact && q.res.Allowed:
			if e := [4]int64{b2i(w.allowed), w.remaining, w.retry, w.reset}; g != e {
				m.fail("%s: [allowed remaining retry reset] = %v, the model says %v", what, g, e)
			}
		case !got.Allowed && w.allowed:
			// A refusal (a store may answer one from what it learnt, such
			// as redisstore's refusal cache, and then say of the other
			// policies only what it knows) must be one that a bucket
			// that got nothing back refuses too.
			m.fail("%s: refused (%v), where a bucket that got nothing back allows it (%v)", what, g, w)
		case w.exact && !got.Allowed && got.RetryAfter > time.Duration(w.retry):
			m.fail("%s: refused for %v, where the model says %v", what, got.RetryAfter, time.Duration(w.retry))
		}
	}
	if m.exact && wants[0].exact && wants[1].exact && wants[2].exact && q.res.Allowed != all {
		m.fail("Take(%q, %v) at %v: allowed %v, the model says %v", key, q.cost, time.Unix(0, now).UTC(), q.res.Allowed, all)
	}
	if !q.res.Allowed {
		for i := range 3 {
			// Taken one at a time and given back at once, unless the
			// store decides them together: a lossy bucket may keep some,
			// and a calendar quota's state is left at its period's end at
			// least (the same bucket, full, unless its zone changes).
			b, l := m.bucket(i, key), m.limit(d, i, key)
			switch {
			case !wants[i].allowed:
			case b.lossy:
				b.upper, b.exact = wants[i].next, false
			case l.Interval() == 0 && b.upper < periodAt(l, now):
				b.upper, b.exact = periodAt(l, now), false
			}
		}
		<-returned
		return nil
	}
	for i := range 3 {
		b, l := m.bucket(i, key), m.limit(d, i, key)
		if !q.res.Results[i].Allowed {
			m.fail("Take(%q, %v): admitted, but %s refused", key, q.cost, q.res.Results[i].Policy.Name)
		}
		next := wants[i].next
		if !wants[i].allowed {
			// the store admitted where a bucket that got nothing back
			// refuses: its own got back more; the history will tell.
			iv, v := stepOf(l, now)
			next = max(b.upper, v) + q.cost[i]*iv
		}
		b.upper = next
		e := &mEvent{at: now, limit: l, cost: q.cost[i], what: fmt.Sprintf("take %d of %q", q.cost[i], key)}
		b.log = append(b.log, e)
		q.takes, q.buckets = append(q.takes, e), append(q.buckets, b)
	}
	m.open = append(m.open, q)
	return q
}

// finish ends q, at once after its decision or later, in one of the ways a
// request ends, and updates the model.
func (m *modelRun) finish(q *mRequest, atOnce bool) {
	if atOnce {
		m.open = m.open[:len(m.open)-1]
	}
	f := mFinish{status: http.StatusOK}
	if m.rng.IntN(10) < 3 {
		f.status = http.StatusInternalServerError
	}
	for u := range f.settle {
		if m.rng.IntN(10) < 5 {
			reserved := q.cost[slices.Index(unitOf[:], u)]
			costs := []int64{0, 1, reserved - 1, reserved + 1, reserved + 5, 40, 1000, math.MaxInt64, 1 << 62, math.MaxInt64 - 1}
			f.settle[u], f.cost[u] = true, costs[m.rng.IntN(len(costs))]
		}
	}
	q.finish <- f
	require.NoError(m.t, <-q.done, "Settle(%v) of Take(%q, %v)", f, q.key, q.cost)
	<-q.returned
	now := m.c.Now().UnixNano()
	for i, b := range q.buckets {
		e, u := q.takes[i], unitOf[i]
		counted := q.cost[i]
		switch {
		case f.settle[u]:
			counted = max(f.cost[u], 1)
		case f.status == http.StatusInternalServerError:
			counted = 0
		}
		e.cost = min(counted, q.cost[i])
		switch {
		case counted > q.cost[i]:
			l := m.limit(q.d, i, q.key) // a charge is of the limit in force
			b.upper = owe(l, b.upper, now, counted-q.cost[i])
			b.log = append(b.log, &mEvent{at: now, limit: l, cost: counted - q.cost[i], charge: true, what: fmt.Sprintf("charge %d of %q", counted-q.cost[i], q.key)})
		case counted < q.cost[i] && atOnce && !b.lossy:
			iv, v := stepOf(e.limit, now)
			b.upper -= min((q.cost[i]-counted)*iv, b.upper-v)
		case counted < q.cost[i]:
			b.exact = false // what comes back of a request held open is the store's to bound
		}
	}
}

// resetKey resets key under every policy but the global one.
func (m *modelRun) resetKey(key string) {
	require.NoError(m.t, m.deploys[m.current].lim.Reset(context.Background(), key))
	now := m.c.Now().UnixNano()
	for i := range 2 {
		b := m.bucket(i, key)
		b.lossy = b.lossy || b.upper-now > 1<<62
		b.upper, b.exact = 0, true
		b.log = append(b.log, &mEvent{at: now, reset: true, what: fmt.Sprintf("reset %q", key)})
	}
}

// checkHistory replays each bucket's history on one exact bucket: every
// counted take must fit when it was taken.
func (m *modelRun) checkHistory() {
	for name, b := range m.buckets {
		var state int64
		for k, e := range b.log {
			switch {
			case e.reset:
				state = 0
			case e.charge:
				state = owe(e.limit, state, e.at, e.cost)
			case e.cost > 0:
				ok, _, _, _, next := decide(e.limit, state, e.at, e.cost)
				if !ok {
					from := max(0, k-8)
					var trail []string
					for _, p := range b.log[from : k+1] {
						trail = append(trail, fmt.Sprintf("%s at %v (%v)", p.what, time.Unix(0, p.at).UTC().Format(time.RFC3339Nano), p.limit))
					}
					m.t.Errorf("bucket %s: an exact bucket refuses %s at %v: past the limit; the history's last events: %v",
						name, e.what, time.Unix(0, e.at).UTC(), trail)
					return
				}
				state = next
			}
		}
	}
}

func (m *modelRun) fail(format string, args ...any) {
	m.t.Helper()
	if m.errs++; m.errs <= 5 {
		m.t.Errorf(format, args...)
	}
}
