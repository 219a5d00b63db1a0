package pace_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/pace"
)

// The tests run in synctest bubbles: time is the bubble's fake clock, which
// moves only when every goroutine waits, so each wait is exact. The base
// transport serves requests in-process, without a network.

// inProcess is a base transport that serves each request with a handler,
// as a server would answer it on the wire (field names canonicalised), and
// records when each request reached the server and its answer's status.
type inProcess struct {
	h      http.Handler
	start  time.Time
	mu     sync.Mutex
	sent   []time.Duration // when each request reached the server, since start
	status []int
	closed atomic.Int64 // answers whose bodies were closed
}

func newInProcess(h http.Handler) *inProcess { return &inProcess{h: h, start: time.Now()} }

func (p *inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	p.sent = append(p.sent, time.Since(p.start))
	p.mu.Unlock()
	w := httptest.NewRecorder()
	p.h.ServeHTTP(w, r)
	if r.Body != nil {
		r.Body.Close()
	}
	resp := w.Result()
	resp.Header = wire(resp.Header)
	resp.Request = r
	resp.Body = &closeCounter{resp.Body, &p.closed}
	p.mu.Lock()
	p.status = append(p.status, resp.StatusCode)
	p.mu.Unlock()
	return resp, nil
}

// times returns when the requests reached the server, in order.
func (p *inProcess) times() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(slices.Values(p.sent))
}

// statuses counts the answers the server gave, by status.
func (p *inProcess) statuses() map[int]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[int]int{}
	for _, s := range p.status {
		m[s]++
	}
	return m
}

type closeCounter struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *closeCounter) Close() error {
	c.n.Add(1)
	return c.ReadCloser.Close()
}

// answer is a status and field lines (name, value, ...).
type answer struct {
	status int
	fields []string
}

// scripted answers its i-th request with as[i], and the last answer after
// that, and keeps the bodies it received.
type scripted struct {
	as     []answer
	mu     sync.Mutex
	n      int
	bodies []string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
	}
	s.mu.Lock()
	a := s.as[min(s.n, len(s.as)-1)]
	s.n++
	s.bodies = append(s.bodies, string(body))
	s.mu.Unlock()
	for i := 0; i < len(a.fields); i += 2 {
		w.Header().Add(a.fields[i], a.fields[i+1])
	}
	w.WriteHeader(a.status)
	io.WriteString(w, "answer body")
}

// get sends a GET to url through c and returns the status, or 0 and the
// error.
func get(c *http.Client, url string) (int, error) {
	return do(c, mustRequest("GET", url, nil))
}

func do(c *http.Client, r *http.Request) (int, error) {
	resp, err := c.Do(r)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func mustRequest(method, url string, body io.Reader) *http.Request {
	r, err := http.NewRequest(method, url, body)
	if err != nil {
		panic(err)
	}
	r.Header.Set("X-API-Key", "demo")
	return r
}

const api = "http://api.test/geocode?q=paris"

// TestPacesToDeclaredQuota: 8 goroutines geocode 60 names through one
// Transport against the middleware's 5 a second in bursts of 10, in each
// of its header formats: none is refused, and the whole takes what the
// quota allows, 10 at once and then one every 200 ms: 10 s, give or take
// the whole seconds of the fields.
func TestPacesToDeclaredQuota(t *testing.T) {
	for _, format := range []ratelimit.HeaderFormat{ratelimit.HeadersIETF, ratelimit.HeadersLegacy, ratelimit.HeadersX} {
		name, _ := format.MarshalText()
		t.Run(string(name), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				server := newInProcess(limited(t, nil, &ratelimit.MiddlewareOptions{Headers: format}, ratelimit.Policy{Limit: ratelimit.PerSecond(5).WithBurst(10)}))
				client := &http.Client{Transport: pace.New(server, nil)}
				start := time.Now()
				names := make(chan int, 60)
				for i := range 60 {
					names <- i
				}
				close(names)
				var wg sync.WaitGroup
				var failed atomic.Int64
				for range 8 {
					wg.Go(func() {
						for range names {
							if code, err := get(client, api); code != http.StatusOK || err != nil {
								failed.Add(1)
							}
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				t.Logf("%s: 60 names in %v, answers %v, %v", name, elapsed, server.statuses(), server.times())
				assert.Equal(t, int64(0), failed.Load(), "names not answered 200")
				assert.Equal(t, map[int]int{http.StatusOK: 60}, server.statuses(), "answers")
				assert.GreaterOrEqual(t, elapsed, 10*time.Second)
				assert.LessOrEqual(t, elapsed, 11*time.Second)
			})
		})
	}
}

// TestHoldsUntilRefill: a request on a spent quota waits exactly until the
// server said more comes, then goes.
func TestHoldsUntilRefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		server := newInProcess(limited(t, nil, nil, ratelimit.Policy{Limit: ratelimit.PerSecond(1).WithBurst(2)}))
		client := &http.Client{Transport: pace.New(server, nil)}
		for range 5 {
			code, err := get(client, api)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, code)
		}
		// r=1;t=1, r=0;t=1: the third waits 1 s; each one after it finds
		// r=0;t=1 again.
		assert.Equal(t, []time.Duration{0, 0, time.Second, 2 * time.Second, 3 * time.Second}, server.times())
	})
}

// TestCountsRequestsInFlight: what is left counts the requests sent whose
// answers have not come back, shared by every goroutine.
func TestCountsRequestsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var hold atomic.Bool
		var inside atomic.Int64
		limitedH := limited(t, nil, nil, ratelimit.Policy{Limit: ratelimit.PerSecond(1).WithBurst(4)})
		server := newInProcess(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if hold.Load() {
				inside.Add(1)
				<-release
			}
			limitedH.ServeHTTP(w, r)
		}))
		client := &http.Client{Transport: pace.New(server, nil)}
		_, err := get(client, api) // r=3
		require.NoError(t, err)

		hold.Store(true)
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() { get(client, api) })
		}
		synctest.Wait()
		assert.Equal(t, int64(3), inside.Load(), "requests sent on r=3")
		close(release)
		wg.Wait()
		// The three answer r=2, r=1, r=0;t=1 (the server decides after the
		// wait); the last two wait for the refill at 1 s, one learns r=0
		// and the other follows at 2 s.
		assert.Equal(t, []time.Duration{0, 0, 0, 0, time.Second, 2 * time.Second}, server.times())
		assert.Equal(t, map[int]int{http.StatusOK: 6}, server.statuses())
	})
}

// TestNewestAnswerWins: of two answers to requests in flight together, the
// one with less left is the newer, whichever comes back first.
func TestNewestAnswerWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &scripted{as: []answer{
			{http.StatusOK, []string{"RateLimit", `"default";r=2;t=10`}},
			{http.StatusOK, []string{"RateLimit", `"default";r=1;t=10`}},
			{http.StatusOK, []string{"RateLimit", `"default";r=0;t=10`}},
		}}
		release, gate := make(chan struct{}), make(chan struct{})
		var n atomic.Int64
		server := newInProcess(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.ServeHTTP(w, r)
			switch n.Add(1) {
			case 1:
				<-release // the first answer, r=2, comes back last
			case 3, 4:
				<-gate
			}
		}))
		client := &http.Client{Transport: pace.New(server, nil)}
		var wg sync.WaitGroup
		wg.Go(func() { get(client, api) })
		synctest.Wait()
		get(client, api) // r=1
		close(release)
		wg.Wait()
		// r=1 is what is left: of two requests at once, one goes, and the
		// other waits for the refill.
		for range 2 {
			wg.Go(func() { get(client, api) })
		}
		synctest.Wait()
		assert.Equal(t, int64(3), n.Load(), "requests sent")
		close(gate)
		wg.Wait()
		assert.Equal(t, []time.Duration{0, 0, 0, 10 * time.Second}, server.times())
	})
}

// TestOtherUnits: a quota in another unit than requests holds no request
// while some of it is left, however little; spent, it holds every request
// until its reset, as a spent quota of requests does.
func TestOtherUnits(t *testing.T) {
	fields := func(rl string) []string {
		return []string{"RateLimit-Policy", `"rate";q=100;w=1, "daily-bytes";q=1000000;qu="content-bytes";w=86400`, "RateLimit", rl}
	}
	few := answer{http.StatusOK, fields(`"rate";r=99;t=1, "daily-bytes";r=1;t=3600`)}
	spent := answer{http.StatusOK, fields(`"rate";r=99;t=1, "daily-bytes";r=0;t=3`)}
	cases := []struct {
		name    string
		answers []answer
		sent    []time.Duration // when the server saw the 3+8 requests
	}{
		{"a byte left", []answer{few}, slices.Repeat([]time.Duration{0}, 11)},
		{"the bytes spent, then refilled", []answer{spent, few}, append([]time.Duration{0}, slices.Repeat([]time.Duration{3 * time.Second}, 10)...)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &scripted{as: c.answers}
				gate := make(chan struct{})
				var n atomic.Int64
				server := newInProcess(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if n.Add(1) > 3 {
						<-gate // the 8 are in flight together
					}
					s.ServeHTTP(w, r)
				}))
				client := &http.Client{Transport: pace.New(server, nil)}
				for range 3 {
					code, err := get(client, api)
					require.NoError(t, err)
					require.Equal(t, http.StatusOK, code)
				}
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() {
						code, err := get(client, api)
						assert.NoError(t, err)
						assert.Equal(t, http.StatusOK, code)
					})
				}
				synctest.Wait()
				assert.Equal(t, int64(3+8), n.Load(), "requests sent, the 8 in flight together")
				close(gate)
				wg.Wait()
				assert.Equal(t, c.sent, server.times())
			})
		})
	}
}

// TestBudgetPerKey: budgets are per server by default, and per whatever
// Options.Key returns.
func TestBudgetPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		spent := &scripted{as: []answer{{http.StatusOK, []string{"RateLimit", `"default";r=0;t=1`}}}}
		server := newInProcess(spent)
		client := &http.Client{Transport: pace.New(server, nil)}
		for _, url := range []string{api, api, "http://API.test:80/geocode", "http://other.test/geocode"} {
			_, err := get(client, url)
			require.NoError(t, err)
		}
		// api.test, then api.test again and again a second later each;
		// other.test at once.
		assert.Equal(t, []time.Duration{0, time.Second, 2 * time.Second, 2 * time.Second}, server.times())

		server = newInProcess(spent)
		byAPIKey := func(r *http.Request) string { return r.URL.Host + " " + r.Header.Get("X-API-Key") }
		client = &http.Client{Transport: pace.New(server, &pace.Options{Key: byAPIKey})}
		for _, key := range []string{"a", "b", "a"} {
			r := mustRequest("GET", api, nil)
			r.Header.Set("X-API-Key", key)
			_, err := do(client, r)
			require.NoError(t, err)
		}
		assert.Equal(t, []time.Duration{0, 0, time.Second}, server.times())
	})
}

// TestRetries: a 429 or 503 with Retry-After is sent again after exactly
// that wait, for requests that can be repeated, with their bodies made
// again; the answers retried are closed.
func TestRetries(t *testing.T) {
	refused := answer{http.StatusTooManyRequests, []string{"Retry-After", "3"}}
	unavailable := answer{http.StatusServiceUnavailable, []string{"Retry-After", "2"}}
	ok := answer{http.StatusOK, nil}
	withKey := mustRequest("POST", api, strings.NewReader("names"))
	withKey.Header.Set("Idempotency-Key", "k1")
	cases := []struct {
		name    string
		req     *http.Request
		answers []answer
		want    int             // the status the caller gets
		sent    []time.Duration // when the server saw the request
	}{
		{"GET", mustRequest("GET", api, nil), []answer{refused, ok}, 200, []time.Duration{0, 3 * time.Second}},
		{"PUT, its body again", mustRequest("PUT", api, strings.NewReader("names")), []answer{refused, ok}, 200, []time.Duration{0, 3 * time.Second}},
		{"503", mustRequest("DELETE", api, nil), []answer{unavailable, ok}, 200, []time.Duration{0, 2 * time.Second}},
		{"POST with an Idempotency-Key", withKey, []answer{refused, ok}, 200, []time.Duration{0, 3 * time.Second}},
		{"POST", mustRequest("POST", api, strings.NewReader("names")), []answer{refused, ok}, 429, []time.Duration{0}},
		{"a body GetBody cannot make again", mustRequest("PUT", api, io.MultiReader(strings.NewReader("names"))), []answer{refused, ok}, 429, []time.Duration{0}},
		{"429 without Retry-After", mustRequest("GET", api, nil), []answer{{http.StatusTooManyRequests, nil}, ok}, 429, []time.Duration{0}},
		{"503 without Retry-After", mustRequest("GET", api, nil), []answer{{http.StatusServiceUnavailable, nil}, ok}, 503, []time.Duration{0}},
		{"twice at most", mustRequest("GET", api, nil), []answer{refused}, 429, []time.Duration{0, 3 * time.Second, 6 * time.Second}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &scripted{as: c.answers}
				server := newInProcess(s)
				client := &http.Client{Transport: pace.New(server, nil)}
				code, err := do(client, c.req)
				require.NoError(t, err)
				assert.Equal(t, c.want, code)
				assert.Equal(t, c.sent, server.times())
				assert.Equal(t, int64(len(c.sent)), server.closed.Load(), "answers closed")
				if c.req.Body != nil {
					assert.Equal(t, slices.Repeat([]string{"names"}, len(c.sent)), s.bodies, "bodies received")
				}
			})
		})
	}
}

// TestMaxRetries: Options.MaxRetries bounds the retries; negative means
// none.
func TestMaxRetries(t *testing.T) {
	for _, c := range []struct{ max, sent int }{{-1, 1}, {1, 2}, {5, 6}} {
		synctest.Test(t, func(t *testing.T) {
			server := newInProcess(&scripted{as: []answer{{http.StatusTooManyRequests, []string{"Retry-After", "1"}}}})
			client := &http.Client{Transport: pace.New(server, &pace.Options{MaxRetries: c.max})}
			code, err := get(client, api)
			require.NoError(t, err)
			assert.Equal(t, http.StatusTooManyRequests, code)
			assert.Len(t, server.times(), c.sent, "MaxRetries %d: requests sent", c.max)
		})
	}
}

// TestWaitTooLong: a wait longer than MaxWait, or past the deadline, fails
// at once with a WaitError naming the wait and its cause.
func TestWaitTooLong(t *testing.T) {
	cases := []struct {
		name   string
		opts   *pace.Options
		answer answer
		ctx    time.Duration // the request's timeout, if any
		want   pace.WaitError
		msg    string
	}{
		{"Retry-After", nil, answer{http.StatusTooManyRequests, []string{"Retry-After", "3600"}}, 0,
			pace.WaitError{Wait: time.Hour, Max: time.Minute, Cause: "the Retry-After of a 429 from api.test"},
			"pace: a wait of 1h0m0s for the Retry-After of a 429 from api.test is longer than the 1m0s the request may still wait (Options.MaxWait)"},
		{"an HTTP-date", nil, answer{http.StatusServiceUnavailable, []string{"Retry-After", "Sat, 01 Jan 2000 02:00:00 GMT", "Date", "Sat, 01 Jan 2000 00:00:00 GMT"}}, 0,
			pace.WaitError{Wait: 2 * time.Hour, Max: time.Minute, Cause: "the Retry-After of a 503 from api.test"}, ""},
		{"an endless Retry-After", nil, answer{http.StatusTooManyRequests, []string{"Retry-After", "99999999999999999999"}}, 0,
			pace.WaitError{Wait: 1<<63 - 1, Max: time.Minute, Cause: "the Retry-After of a 429 from api.test"}, ""},
		{"the deadline", nil, answer{http.StatusTooManyRequests, []string{"Retry-After", "10"}}, 5 * time.Second,
			pace.WaitError{Wait: 10 * time.Second, Max: 5 * time.Second, Cause: "the Retry-After of a 429 from api.test"},
			"pace: a wait of 10s for the Retry-After of a 429 from api.test would pass the request's deadline, in 5s"},
		{"no wait at all", &pace.Options{MaxWait: -1}, answer{http.StatusTooManyRequests, []string{"Retry-After", "1"}}, 0,
			pace.WaitError{Wait: time.Second, Cause: "the Retry-After of a 429 from api.test"}, ""},
		{"a refill", &pace.Options{MaxWait: 10 * time.Second}, answer{http.StatusOK, []string{"RateLimit-Policy", `"hourly";q=100;w=3600`, "RateLimit", `"hourly";r=0;t=30`}}, 0,
			pace.WaitError{Wait: 30 * time.Second, Max: 10 * time.Second, Cause: `the quota of api.test ("hourly": 0 left of 100 per 1h0m0s) to refill`},
			`pace: a wait of 30s for the quota of api.test ("hourly": 0 left of 100 per 1h0m0s) to refill is longer than the 10s the request may still wait (Options.MaxWait)`},
		{"an endless refill", nil, answer{http.StatusOK, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "999999999"}}, 0,
			pace.WaitError{Wait: 999999999 * time.Second, Max: time.Minute, Cause: "the quota of api.test (0 left) to refill"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				server := newInProcess(&scripted{as: []answer{c.answer}})
				client := &http.Client{Transport: pace.New(server, c.opts)}
				ctx := t.Context()
				if c.ctx > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.ctx)
					defer cancel()
				}
				start := time.Now()
				for range 2 { // the first learns the wait, the second too
					code, err := do(client, mustRequest("GET", api, nil).WithContext(ctx))
					if code == http.StatusOK {
						continue
					}
					var we *pace.WaitError
					require.ErrorAs(t, err, &we)
					assert.Equal(t, c.want.Wait, we.Wait)
					assert.Equal(t, c.want.Max, we.Max)
					assert.Equal(t, c.want.Cause, we.Cause)
					if c.msg != "" {
						assert.Equal(t, c.msg, we.Error())
					}
					assert.Equal(t, c.ctx > 0, errors.Is(err, context.DeadlineExceeded), "errors.Is(%v, context.DeadlineExceeded)", err)
				}
				assert.Equal(t, time.Duration(0), time.Since(start), "failed at once")
				assert.Len(t, server.times(), 1, "requests sent")
				assert.Equal(t, int64(1), server.closed.Load(), "answers closed")
			})
		})
	}
}

// TestWaitForAnswerIsBounded: a request that waits for the answer of the
// one request learning where a spent quota stands waits no longer than
// what is left of MaxWait, or its deadline.
func TestWaitForAnswerIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		var n atomic.Int64
		s := &scripted{as: []answer{{http.StatusOK, []string{"RateLimit", `"default";r=0`}}}}
		server := newInProcess(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 2 {
				<-gate // the probe hangs
			}
			s.ServeHTTP(w, r)
		}))
		client := &http.Client{Transport: pace.New(server, &pace.Options{MaxWait: 3 * time.Second})}
		get(client, api) // r=0, no t
		var wg sync.WaitGroup
		wg.Go(func() { get(client, api) }) // the probe
		synctest.Wait()
		start := time.Now()
		_, err := get(client, api)
		var we *pace.WaitError
		require.ErrorAs(t, err, &we)
		assert.Equal(t, 3*time.Second, we.Wait)
		assert.Equal(t, `pace: the request waited 3s, all it may wait (Options.MaxWait), for an answer from api.test saying when its spent quota ("default": 0 left) refills`, we.Error())
		assert.Equal(t, 3*time.Second, time.Since(start))

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err = do(client, mustRequest("GET", api, nil).WithContext(ctx))
		require.ErrorAs(t, err, &we)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, we.Wait)
		close(gate)
		wg.Wait()
	})
}

// TestMaxWaitCountsEveryWait: MaxWait bounds a request's waits together,
// not each of them.
func TestMaxWaitCountsEveryWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		server := newInProcess(&scripted{as: []answer{{http.StatusTooManyRequests, []string{"Retry-After", "40"}}}})
		client := &http.Client{Transport: pace.New(server, nil)}
		start := time.Now()
		_, err := get(client, api)
		var we *pace.WaitError
		require.ErrorAs(t, err, &we)
		assert.Equal(t, pace.WaitError{Wait: 40 * time.Second, Max: 20 * time.Second, Cause: "the Retry-After of a 429 from api.test"}, *we)
		assert.Equal(t, 40*time.Second, time.Since(start), "the second wait failed at once")
	})
}

// TestCancelEndsWaits: the end of a request's context ends its wait at
// once, and gives its own limit's turn back.
func TestCancelEndsWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		server := newInProcess(&scripted{as: []answer{{http.StatusTooManyRequests, []string{"Retry-After", "30"}}}})
		client := &http.Client{Transport: pace.New(server, nil)}
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(5*time.Second, cancel)
		start := time.Now()
		_, err := do(client, mustRequest("GET", api, nil).WithContext(ctx))
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 5*time.Second, time.Since(start))
	})
	synctest.Test(t, func(t *testing.T) {
		server := newInProcess(&scripted{as: []answer{{http.StatusOK, nil}}})
		client := &http.Client{Transport: pace.New(server, &pace.Options{Limit: ratelimit.PerSecond(1)})}
		_, err := get(client, api) // at 0
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(500*time.Millisecond, cancel)
		_, err = do(client, mustRequest("GET", api, nil).WithContext(ctx)) // would go at 1 s
		assert.ErrorIs(t, err, context.Canceled)
		_, err = get(client, api) // takes the turn given back
		require.NoError(t, err)
		assert.Equal(t, []time.Duration{0, time.Second}, server.times())
	})
}

// TestOwnLimit: Options.Limit paces requests on top of the server's, in
// order: its burst at once, then one every interval; a request whose turn
// is further than MaxWait fails at once.
func TestOwnLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		server := newInProcess(&scripted{as: []answer{{http.StatusOK, nil}}})
		client := &http.Client{Transport: pace.New(server, &pace.Options{Limit: ratelimit.Per(2, time.Second).WithBurst(2), MaxWait: 1200 * time.Millisecond})}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var errs []error
		for range 7 {
			wg.Go(func() {
				if _, err := get(client, api); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		ms := time.Millisecond
		assert.Equal(t, []time.Duration{0, 0, 500 * ms, 1000 * ms}, server.times(), "the 5th would wait 1.5 s")
		require.Len(t, errs, 3)
		var we *pace.WaitError
		require.ErrorAs(t, errs[0], &we)
		assert.Equal(t, "the own limit of 2/s (Options.Limit)", we.Cause)
		assert.Equal(t, 1200*ms, we.Max)
		assert.Contains(t, []time.Duration{1500 * ms, 2000 * ms}, we.Wait)
	})
}

// TestOwnCalendarQuota: a calendar quota of the client's own is waited for
// until its reset, within MaxWait.
func TestOwnCalendarQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		server := newInProcess(&scripted{as: []answer{{http.StatusOK, nil}}})
		start := time.Now() // the bubble's clock: 2000-01-01T00:00:00Z
		opts := &pace.Options{Limit: ratelimit.Daily(2, time.UTC), MaxWait: 25 * time.Hour}
		client := &http.Client{Transport: pace.New(server, opts)}
		for range 3 {
			_, err := get(client, api)
			require.NoError(t, err)
		}
		assert.Equal(t, []time.Duration{0, 0, 24 * time.Hour}, server.times())

		opts.MaxWait = time.Hour
		client = &http.Client{Transport: pace.New(server, opts)}
		for range 2 {
			_, err := get(client, api)
			require.NoError(t, err)
		}
		_, err := get(client, api)
		var we *pace.WaitError
		require.ErrorAs(t, err, &we)
		assert.Equal(t, pace.WaitError{Wait: 24 * time.Hour, Max: time.Hour, Cause: "the own limit of 2/day (UTC) (Options.Limit)"}, *we)
		assert.Equal(t, 24*time.Hour, time.Since(start))
	})
}

// TestTransportErrorFreesItsPlace: a request that fails without an answer
// gives back its place in flight.
func TestTransportErrorFreesItsPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		server := newInProcess(&scripted{as: []answer{{http.StatusOK, []string{"RateLimit", `"default";r=1;t=60`}}}})
		var fail atomic.Bool
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if fail.Load() {
				return nil, errors.New("connection refused")
			}
			return server.RoundTrip(r)
		})
		client := &http.Client{Transport: pace.New(base, nil)}
		_, err := get(client, api) // r=1
		require.NoError(t, err)
		fail.Store(true)
		_, err = get(client, api)
		assert.ErrorContains(t, err, "connection refused")
		fail.Store(false)
		_, err = get(client, api) // still r=1: no wait
		require.NoError(t, err)
		assert.Equal(t, []time.Duration{0, 0}, server.times())
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestOwnLimitInvalid: an invalid Limit fails every request, naming it.
func TestOwnLimitInvalid(t *testing.T) {
	server := newInProcess(&scripted{as: []answer{{http.StatusOK, nil}}})
	client := &http.Client{Transport: pace.New(server, &pace.Options{Limit: ratelimit.PerSecond(-5)})}
	_, err := get(client, api)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pace: Options.Limit: ratelimit: policy \"own\": PerSecond(-5): the number of tokens must be positive")
	assert.Empty(t, server.times())
}

// TestWithoutFields: a server that declares nothing is sent requests
// freely; so are fields that are malformed or negative.
func TestWithoutFields(t *testing.T) {
	for _, fields := range [][]string{
		nil,
		{"RateLimit", `"default";r=-1;t=5`},
		{"RateLimit", `"default";r=0;t=5,`},
		{"X-RateLimit-Remaining", "-3", "X-RateLimit-Reset", "5"},
		{"Retry-After", "30"},                           // on a 200
		{"Age", "10", "RateLimit", `"default";r=0;t=5`}, // from a cache
	} {
		synctest.Test(t, func(t *testing.T) {
			server := newInProcess(&scripted{as: []answer{{http.StatusOK, fields}}})
			client := &http.Client{Transport: pace.New(server, nil)}
			var wg sync.WaitGroup
			for range 20 {
				wg.Go(func() { get(client, api) })
			}
			wg.Wait()
			for range 5 {
				get(client, api)
			}
			assert.Equal(t, slices.Repeat([]time.Duration{0}, 25), server.times(), "fields %q", fields)
		})
	}
}

// TestSpentWithoutRefill: a quota spent with no word of when it refills is
// probed with one request at a time; an answer to the probe without fields
// means the server declares none any more.
func TestSpentWithoutRefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		gate := make(chan struct{})
		var inside, most atomic.Int64
		s := &scripted{as: []answer{{http.StatusOK, []string{"RateLimit", `"default";r=0`}}}}
		server := newInProcess(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := inside.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			mu.Lock()
			g := gate
			mu.Unlock()
			<-g
			inside.Add(-1)
			s.ServeHTTP(w, r)
		}))
		client := &http.Client{Transport: pace.New(server, nil)}
		close(gate)
		get(client, api) // r=0, no t
		mu.Lock()
		gate = make(chan struct{})
		mu.Unlock()
		var wg sync.WaitGroup
		for range 7 {
			wg.Go(func() { get(client, api) })
		}
		for range 7 {
			synctest.Wait()
			assert.Equal(t, int64(1), inside.Load(), "requests in flight")
			gate <- struct{}{}
		}
		wg.Wait()
		assert.Equal(t, int64(1), most.Load(), "requests in flight at once")

		s.mu.Lock()
		s.as = []answer{{http.StatusOK, nil}}
		s.mu.Unlock()
		go func() { gate <- struct{}{} }()
		get(client, api) // the probe: no field
		for range 5 {
			wg.Go(func() { get(client, api) })
		}
		synctest.Wait()
		assert.Equal(t, int64(5), inside.Load(), "requests in flight, freely")
		close(gate)
		wg.Wait()
	})
}

// TestEmptyKey: an empty key fails the request.
func TestEmptyKey(t *testing.T) {
	server := newInProcess(&scripted{as: []answer{{http.StatusOK, nil}}})
	client := &http.Client{Transport: pace.New(server, &pace.Options{Key: func(*http.Request) string { return "" }})}
	_, err := get(client, api)
	assert.ErrorContains(t, err, "pace: Options.Key returned an empty key for a request to api.test")
	assert.Empty(t, server.times())
}

// TestOverTheWire: against a real server on loopback, on the real clock,
// the Transport reads the fields as they arrive, canonicalised: of 6
// requests of 3 goroutines to 4 a second in bursts of 4, the first 4 go at
// once and the others after t=1, and none is refused.
func TestOverTheWire(t *testing.T) {
	var refused atomic.Int64
	h := limited(t, nil, nil, ratelimit.Policy{Limit: ratelimit.PerSecond(4)})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code == http.StatusTooManyRequests {
			refused.Add(1)
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	defer srv.Close()
	tr := pace.New(&http.Transport{}, nil)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	start := time.Now()
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for range 2 {
				code, err := get(client, srv.URL+"/geocode")
				assert.NoError(t, err)
				assert.Equal(t, http.StatusOK, code)
			}
		})
	}
	wg.Wait()
	t.Logf("6 requests in %v", time.Since(start))
	assert.Equal(t, int64(0), refused.Load(), "429s")
	assert.GreaterOrEqual(t, time.Since(start), time.Second, "t=1")
	assert.Less(t, time.Since(start), 3*time.Second)
}

// TestOtherUnitsOverTheWire: against a real server on loopback that
// declares a quota of requests with plenty left and one of bytes with 5
// left, 8 goroutines send 40 requests, none held (a hold, until the bytes'
// reset in an hour, would fail at once, past MaxWait); once the bytes are
// spent, the next request fails at once, naming them, unsent.
func TestOtherUnitsOverTheWire(t *testing.T) {
	var bytesLeft, served atomic.Int64
	bytesLeft.Store(5)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.Header().Set("RateLimit-Policy", `"rate";q=1000;w=1, "daily-bytes";q=1000000;qu="content-bytes";w=86400`)
		w.Header().Set("RateLimit", fmt.Sprintf(`"rate";r=999;t=1, "daily-bytes";r=%d;t=3600`, bytesLeft.Load()))
	}))
	defer srv.Close()
	tr := pace.New(&http.Transport{}, &pace.Options{MaxWait: time.Second})
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 5 {
				code, err := get(client, srv.URL)
				assert.NoError(t, err)
				assert.Equal(t, http.StatusOK, code)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(40), served.Load(), "requests served")

	bytesLeft.Store(0)
	code, err := get(client, srv.URL) // answered: the bytes are spent
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	_, err = get(client, srv.URL)
	var we *pace.WaitError
	require.ErrorAs(t, err, &we)
	assert.Equal(t, time.Hour, we.Wait.Round(time.Second))
	host := strings.TrimPrefix(srv.URL, "http://")
	assert.Equal(t, "the quota of "+host+` ("daily-bytes": 0 content-bytes left of 1000000 per 24h0m0s) to refill`, we.Cause)
	assert.Equal(t, int64(41), served.Load(), "requests served")
}

// TestStalledRefusalEndsWithinMaxWait: a 429 with Retry-After whose body
// stalls, from a real server on loopback, on the real clock, holds the
// request no longer than MaxWait: the body of a refused answer is closed
// unread before the retry, not drained.
func TestStalledRefusalEndsWithinMaxWait(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "slow")
		w.(http.Flusher).Flush()
		select { // the rest never comes
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	var once sync.Once
	defer once.Do(func() { close(release) })
	tr := pace.New(&http.Transport{}, &pace.Options{MaxWait: time.Second})
	defer tr.CloseIdleConnections()

	start := time.Now()
	done := make(chan error, 1)
	go func() {
		resp, err := tr.RoundTrip(mustRequest("GET", srv.URL, nil))
		if resp != nil {
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		var we *pace.WaitError
		require.ErrorAs(t, err, &we)
		assert.Contains(t, we.Cause, "the Retry-After of a 429 from 127.0.0.1")
		assert.Less(t, time.Since(start), 2*time.Second, "RoundTrip, MaxWait 1s")
	case <-time.After(5 * time.Second):
		t.Errorf("RoundTrip had not returned after 5s, MaxWait 1s")
		once.Do(func() { close(release) })
		<-done
	}
}
