package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// uaSetup is the under-admission simulation's setup: the traffic, the
// policy of every key, and the lease times and instance counts compared.
// 100 keys, not the thousands a service has, so that every key sees
// hundreds of requests, its bucket empties and refills many times, in a
// run of a few seconds' traffic.
var uaSetup = struct {
	keys      int
	limit     ratelimit.Limit
	load      float64 // the arrival rate of every key under uniform traffic, over its rate
	zipf      float64 // the Zipf exponent of skewed traffic
	requests  int
	seed      uint64
	leases    []time.Duration // 0 first: no leases, the reference
	instances []int
}{
	keys:      100,
	limit:     ratelimit.PerSecond(100).WithBurst(20),
	load:      0.9,
	zipf:      1.1,
	requests:  40_000,
	seed:      1,
	leases:    []time.Duration{0, 10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond},
	instances: []int{2, 4, 8},
}

// A uaTraffic is a sequence of requests: the time from each one to the
// next, and the key of each.
type uaTraffic struct {
	name string
	gaps []int64 // nanoseconds
	keys []int
}

// A uaCell is the outcome of one traffic on one lease time and instance
// count.
type uaCell struct {
	requests int
	under    int // refused by the store, admitted by the exact bucket
	over     int // admitted by the store, refused by the exact bucket
	admitted int // by the store
	exact    int // admitted by the exact bucket
	scripts  int64
	warmUps  int64         // script calls before the requests
	fake     time.Duration // simulated time
}

// TestUnderAdmission measures what token leases cost: the requests that
// instances sharing one Redis bucket refuse while the exact bucket would
// admit them, because tokens sit in another instance's lease. It is a
// deterministic simulation (seeded traffic on a fake clock, one request at
// a time) against a real redis-server, and prints a Markdown section for
// BENCHMARKS.md. It runs only with UNDERADMISSION=1 (./scripts/bench sets
// it).
func TestUnderAdmission(t *testing.T) {
	if os.Getenv("UNDERADMISSION") != "1" {
		t.Skip("UNDERADMISSION=1 runs the simulation")
	}
	srv := redistest.Start(t)
	s := uaSetup
	rate := float64(time.Second) / float64(s.limit.Interval()) // per key, a second
	total := s.load * rate * float64(s.keys)                   // arrivals a second, all keys
	traffics := []uaTraffic{
		uaTrafficOf("uniform", 1, total, func(r *rand.Rand) func() int {
			return func() int { return r.IntN(s.keys) }
		}),
		uaTrafficOf("Zipf", 2, total, func(r *rand.Rand) func() int {
			z := rand.NewZipf(r, s.zipf, 1, uint64(s.keys-1))
			return func() int { return int(z.Uint64()) }
		}),
	}
	// The cells are independent (a clock, instances and keys of their
	// own), so they run side by side, each one request at a time.
	client := srv.Client()
	before := redistest.Commands(t, client, "evalsha", "eval")
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	cells := map[string]uaCell{}
	for _, tr := range traffics {
		for _, lease := range s.leases {
			for _, n := range s.instances {
				wg.Go(func() {
					c, err := uaRun(srv.Addr, tr, lease, n)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, fmt.Errorf("%s, lease %v, %d instances: %w", tr.name, lease, n, err))
						return
					}
					cells[uaKey(tr.name, lease, n)] = c
				})
			}
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	scripts := int64(0)
	for key, c := range cells {
		scripts += c.warmUps + c.scripts
		if strings.Contains(key, " 0s ") && (c.under != 0 || c.over != 0) {
			t.Errorf("%s, no leases: %d refused and %d admitted against the exact bucket, want 0 and 0", key, c.under, c.over)
		}
	}
	// The instances' count of script calls is what Redis ran.
	if ran := redistest.Commands(t, client, "evalsha", "eval") - before; ran != scripts {
		t.Errorf("Redis ran %d script calls, the instances counted %d", ran, scripts)
	}
	uaReport(os.Stdout, rate, total, traffics, cells)
}

// uaTrafficOf returns s.requests requests arriving at exponential intervals,
// total a second, on the keys that key draws, from the random stream
// numbered stream.
func uaTrafficOf(name string, stream uint64, total float64, key func(*rand.Rand) func() int) uaTraffic {
	s := uaSetup
	r := rand.New(rand.NewPCG(s.seed, stream))
	next := key(r)
	tr := uaTraffic{name: name, gaps: make([]int64, s.requests), keys: make([]int, s.requests)}
	for i := range tr.gaps {
		tr.gaps[i] = int64(r.ExpFloat64() * float64(time.Second) / total)
		tr.keys[i] = next()
	}
	return tr
}

func uaKey(traffic string, lease time.Duration, n int) string {
	return fmt.Sprintf("%s %v %d", traffic, lease, n)
}

// uaRun sends the requests of tr to n instances, each a Store on its own
// client with Options.Lease lease, chosen at random for each request, and
// decides each request by the exact bucket too.
func uaRun(addr string, tr uaTraffic, lease time.Duration, n int) (uaCell, error) {
	s := uaSetup
	p := &ratelimit.Policy{Limit: s.limit}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	start := now
	clock := func() time.Time { return time.Unix(0, now) }
	prefix := "ua:" + uaKey(tr.name, lease, n) + ":"
	var scripts atomic.Int64
	stores := make([]*redisstore.Store, n)
	for i := range stores {
		// No retries: a script call retried could run twice.
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer client.Close()
		client.AddHook(&uaPersist{client: client, scripts: &scripts})
		// A deadline far longer than any pause of this machine: time is
		// the fake clock's.
		st, err := redisstore.New(client, &redisstore.Options{Prefix: prefix, Clock: clock, Lease: lease, Timeout: time.Minute})
		if err != nil {
			return uaCell{}, err
		}
		stores[i] = st
	}
	names := make([]string, s.keys)
	for i := range names {
		names[i] = "key-" + strconv.Itoa(i)
	}
	ctx := context.Background()
	for _, st := range stores { // dials, and loads the script
		if _, err := st.Take(ctx, p, "warm-up", 0); err != nil {
			return uaCell{}, err
		}
	}
	pick := rand.New(rand.NewPCG(s.seed, 100+uint64(n))) // a stream of its own, the same for every lease time
	exact := make([]int64, s.keys)                       // the exact bucket of every key
	c := uaCell{requests: len(tr.gaps)}
	c.warmUps = scripts.Load()
	for i, gap := range tr.gaps {
		now += gap
		k := tr.keys[i]
		res, err := stores[pick.IntN(n)].Take(ctx, p, names[k], 1)
		if err != nil {
			return uaCell{}, err
		}
		want, next := p.Decide(exact[k], now, 1)
		if want.Allowed {
			exact[k] = next
			c.exact++
		}
		if res.Allowed {
			c.admitted++
		}
		switch {
		case want.Allowed && !res.Allowed:
			c.under++
		case res.Allowed && !want.Allowed:
			c.over++
		}
	}
	c.fake = time.Duration(now - start)
	c.scripts = scripts.Load() - c.warmUps
	return c, nil
}

// uaPersist is a hook of a simulated instance's client: it counts the
// script calls, and makes the keys of each persistent (PERSIST), in the
// same round trip, right after it. Redis expires a bucket's key on its own
// clock, at the time the bucket is full again on the simulation's; the
// simulated time runs behind the real one (or stops, while the machine is
// busy elsewhere), and Redis would forget buckets early. A bucket whose
// state is in the past is full whether its key is there or not, so keeping
// keys changes no decision.
type uaPersist struct {
	client  *redis.Client
	scripts *atomic.Int64
}

func (h *uaPersist) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook sends a script call as a pipeline, for ProcessPipelineHook.
func (h *uaPersist) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if uaScriptKeys(cmd) == nil {
			return next(ctx, cmd)
		}
		h.client.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Process(ctx, cmd) })
		return cmd.Err()
	}
}

func (h *uaPersist) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var persist []redis.Cmder
		for _, cmd := range cmds {
			keys := uaScriptKeys(cmd)
			if keys == nil {
				continue
			}
			h.scripts.Add(1)
			for _, k := range keys {
				persist = append(persist, redis.NewIntCmd(ctx, "persist", k))
			}
		}
		return next(ctx, append(slices.Clip(cmds), persist...))
	}
}

// uaScriptKeys returns the keys of a script call (EVALSHA or EVAL), or nil
// for another command.
func uaScriptKeys(cmd redis.Cmder) []string {
	if name := cmd.Name(); name != "evalsha" && name != "eval" {
		return nil
	}
	args := cmd.Args()
	if len(args) < 3 {
		return nil
	}
	n, err := strconv.Atoi(fmt.Sprint(args[2]))
	if err != nil || len(args) < 3+n {
		return nil
	}
	keys := make([]string, 0, n)
	for _, k := range args[3 : 3+n] {
		keys = append(keys, fmt.Sprint(k))
	}
	return keys
}

// uaThousands writes n with its thousands apart, as "40 000".
func uaThousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + " " + s[i:]
	}
	return s
}

// uaReport writes the setup and the results as Markdown.
func uaReport(w io.Writer, rate, total float64, traffics []uaTraffic, cells map[string]uaCell) {
	s := uaSetup
	// The Zipf keys' share of the traffic, and how many exceed their rate.
	h := 0.0
	for k := range s.keys {
		h += math.Pow(float64(k+1), -s.zipf)
	}
	above := 0
	for k := range s.keys {
		if math.Pow(float64(k+1), -s.zipf)/h*total > rate {
			above++
		}
	}
	first := cells[uaKey(traffics[0].name, 0, s.instances[0])]
	fmt.Fprintf(w, "A simulation against one redis-server on loopback: N\n")
	fmt.Fprintf(w, "instances, each a `redisstore.Store` on a client of its own with\n")
	fmt.Fprintf(w, "`Options{Lease: L}` (and the refusal cache, on by default), all reading one\n")
	fmt.Fprintf(w, "fake clock. %s requests of cost 1 arrive one at a time at exponential\n", uaThousands(s.requests))
	fmt.Fprintf(w, "intervals (seed %d), %s a second in all (%.1f s of traffic), each on one\n", s.seed, uaThousands(int(total)), first.fake.Seconds())
	fmt.Fprintf(w, "of %d keys limited to `PerSecond(%d).WithBurst(%d)` (leases of at most %d\n", s.keys, int64(rate), s.limit.Burst(), max(s.limit.Burst()/8, 1))
	fmt.Fprintf(w, "tokens, an eighth of the burst), and goes to an instance drawn at random.\n")
	fmt.Fprintf(w, "Uniform traffic: every key %.0f a second, %.0f %% of its rate. Zipf traffic\n", s.load*rate, 100*s.load)
	fmt.Fprintf(w, "(s = %.1f): the same %s a second, the hottest key %.0f %% of it (%.0f× its\n", s.zipf, uaThousands(int(total)), 100/h, total/h/rate)
	fmt.Fprintf(w, "rate), %d keys above their rate and %d below. Each request is decided by\n", above, s.keys-above)
	fmt.Fprintf(w, "the store and by the exact bucket: `Policy.Decide` on one state per key,\n")
	fmt.Fprintf(w, "what one Redis bucket without leases decides. (The instances' clients\n")
	fmt.Fprintf(w, "make the buckets' keys persistent after each script call, since Redis\n")
	fmt.Fprintf(w, "would expire them on its own clock, not the simulation's; a bucket whose\n")
	fmt.Fprintf(w, "time has passed is full either way.) The traffic and the choice of\n")
	fmt.Fprintf(w, "instances are seeded; each store's hash seed, which places the keys in its\n")
	fmt.Fprintf(w, "lease table, is not, so the figures move a little from run to run, by up\n")
	fmt.Fprintf(w, "to a couple of points where the under-admission is large.\n\n")

	exact := func(tr string) string {
		c := cells[uaKey(tr, 0, s.instances[0])]
		return fmt.Sprintf("%.1f %%", 100*float64(c.exact)/float64(c.requests))
	}
	fmt.Fprintf(w, "The exact bucket admits %s of the uniform requests and %s of\n", exact(traffics[0].name), exact(traffics[1].name))
	fmt.Fprintf(w, "the Zipf ones.\n\n")

	pct := func(n, of int) string {
		switch v := 100 * float64(n) / float64(of); {
		case n == 0:
			return "0"
		case v < 0.005:
			return "< 0.01 %"
		default:
			return fmt.Sprintf("%.2f %%", v)
		}
	}
	table := func(title string, cell func(uaCell) string) {
		fmt.Fprintf(w, "%s\n\n| lease |", title)
		for _, tr := range traffics {
			for _, n := range s.instances {
				fmt.Fprintf(w, " %s, %d instances |", tr.name, n)
			}
		}
		fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---:|", len(traffics)*len(s.instances)))
		for _, lease := range s.leases {
			name := lease.String()
			if lease == 0 {
				name = "none (exact)"
			}
			fmt.Fprintf(w, "| %s |", name)
			for _, tr := range traffics {
				for _, n := range s.instances {
					fmt.Fprintf(w, " %s |", cell(cells[uaKey(tr.name, lease, n)]))
				}
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w)
	}
	table("Refused by the store, admitted by the exact bucket, in % of requests: the under-admission.",
		func(c uaCell) string { return pct(c.under, c.requests) })
	table("Admitted by the store, refused by the exact bucket, in % of requests.",
		func(c uaCell) string { return pct(c.over, c.requests) })
	table("Admitted by the store, in % of requests.",
		func(c uaCell) string { return pct(c.admitted, c.requests) })
	table("Script calls per request (`EVALSHA`, and `EVAL` if Redis lacked the script).",
		func(c uaCell) string { return fmt.Sprintf("%.2f", float64(c.scripts)/float64(c.requests)) })

	fmt.Fprintf(w, "The second table is not over-admission: leases never admit what the\n")
	fmt.Fprintf(w, "shared bucket does not hold (`TestLeasesNeverOverAdmit` in redisstore\n")
	fmt.Fprintf(w, "replays every admission through the exact bucket). Once the store refuses\n")
	fmt.Fprintf(w, "a request that the exact bucket admits, the two decide different\n")
	fmt.Fprintf(w, "sequences: the store's bucket keeps the token the exact one spent, and a\n")
	fmt.Fprintf(w, "later request that the exact bucket refuses may find it. What leases cost\n")
	fmt.Fprintf(w, "in all is the difference between the exact bucket's admitted share, above,\n")
	fmt.Fprintf(w, "and the store's, in the third table.\n\n")
	fmt.Fprintf(w, "The script keeps a lease's room out of the bucket, spent or not (it\n")
	fmt.Fprintf(w, "cannot know), until the lease goes back with the key's next decision on\n")
	fmt.Fprintf(w, "its instance after it ends (or three to four lease times after it was\n")
	fmt.Fprintf(w, "taken, if that instance does not ask again by then: what was left of it\n")
	fmt.Fprintf(w, "is then lost). Tokens spent from a live lease thus\n")
	fmt.Fprintf(w, "count twice until it goes back, and tokens idle in one instance's lease\n")
	fmt.Fprintf(w, "are refused to the others: the more instances and the longer the lease\n")
	fmt.Fprintf(w, "against burst / rate (%v here), the more is refused.\n", time.Duration(float64(s.limit.Burst())/rate*float64(time.Second)))
}
