package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/storetest"
)

type traceLine struct {
	t    int64
	key  string
	cost int64
}

var traceKeys = []string{"a", "b,c", `"q"`, "日本", "k:1", "#x"}

// randomTrace returns n requests on a few keys, at times that are random to
// the nanosecond (so not on refill boundaries), with runs of requests at the
// same instant, short gaps and long idle spells, and costs from 0 to just
// above the burst.
func randomTrace(r *rand.Rand, n int, burst int64, interval time.Duration) ([]traceLine, string) {
	keys := traceKeys[:1+r.IntN(len(traceKeys))]
	var lines []traceLine
	var b strings.Builder
	b.WriteString("# random trace\n")
	t := int64(0)
	for range n {
		switch p := r.IntN(10); {
		case p < 3: // same instant
		case p < 9:
			t += r.Int64N(2 * int64(interval))
		default:
			t += r.Int64N(3 * int64(interval) * burst)
		}
		l := traceLine{t: t, key: keys[r.IntN(len(keys))], cost: 1}
		if r.IntN(4) == 0 {
			l.cost = r.Int64N(burst + 2)
		}
		lines = append(lines, l)
		fmt.Fprintf(&b, "%s %s %d\n", formatSeconds(l.t), l.key, l.cost)
	}
	return lines, b.String()
}

var algorithms = []string{"token-bucket", "leaky-police", "leaky-shape"}

// The CLI decides as a ratelimit.Limiter over the memory store, on a clock
// driven to the same times, for every algorithm, starting full or empty.
func TestDecisionsEqualLibrary(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	rates := []float64{0.5, 1, 2, 3, 5, 7, 10, 100, 1.7}
	for i := range 120 {
		alg := algorithms[i%len(algorithms)]
		rateFlag := rates[r.IntN(len(rates))]
		burst := 1 + r.Int64N(12)
		empty := r.IntN(2) == 0
		var a ratelimit.Algorithm
		require.NoError(t, a.UnmarshalText([]byte(alg)))
		p := ratelimit.Policy{Limit: rateLimit(rateFlag, burst), Algorithm: a}
		lines, trace := randomTrace(r, 150, burst, p.Limit.Interval())

		start := "full"
		if empty {
			start = "empty"
		}
		args := []string{"-algorithm", alg, "-rate", strconv.FormatFloat(rateFlag, 'g', -1, 64),
			"-burst", strconv.FormatInt(burst, 10), "-start", start, "-format", "csv"}
		stdout, stderr, code := runCLI(t, trace, args...)
		require.Equal(t, 0, code, stderr)
		rows := parseCSV(t, stdout)
		require.Len(t, rows, len(lines))

		lim, clock := libraryLimiter(t, p, time.Time{}, empty)
		if !checkLibrary(t, lim, clock, lines, rows, fmt.Sprintf("trace %d (%q)", i, args)) {
			return
		}
	}
}

// libraryLimiter returns a Limiter of p over the memory store and the
// store's clock, at epoch unless it is zero. With empty set, every key of
// traceKeys is empty at that time: its burst spent, and for the shaping
// queue its last place too.
func libraryLimiter(t *testing.T, p ratelimit.Policy, epoch time.Time, empty bool) (*ratelimit.Limiter, *storetest.Clock) {
	t.Helper()
	clock := new(storetest.Clock)
	if !epoch.IsZero() {
		clock.Advance(epoch.Sub(clock.Now()))
	}
	store, err := memorystore.New(&memorystore.Options{Clock: clock.Now})
	require.NoError(t, err)
	lim, err := ratelimit.New(store, p)
	require.NoError(t, err)
	if !empty {
		return lim, clock
	}
	for _, k := range traceKeys {
		_, err := lim.Take(context.Background(), k, p.Limit.Burst())
		require.NoError(t, err)
		if p.Algorithm == ratelimit.LeakyShape {
			_, err = lim.Take(context.Background(), k, 1)
			require.NoError(t, err)
		}
	}
	return lim, clock
}

// checkLibrary takes the requests of lines from lim, its clock advanced to
// each line's time, and checks that rows, the CLI's CSV of the same trace
// (named by trace), hold the same decisions; a cost above the burst is
// refused with no retry_after. It reports whether all rows matched.
func checkLibrary(t *testing.T, lim *ratelimit.Limiter, clock *storetest.Clock, lines []traceLine, rows []map[string]string, trace string) bool {
	t.Helper()
	burst := lim.Policies()[0].Limit.Burst()
	now := int64(0)
	for j, l := range lines {
		clock.Advance(time.Duration(l.t - now))
		now = l.t
		row := rows[j]
		what := fmt.Sprintf("%s line %d: %s %q %d", trace, j+2, formatSeconds(l.t), l.key, l.cost)
		if l.cost > burst {
			assert.Equal(t, []string{"false", "0"}, []string{row["allowed"], row["retry_after"]}, what)
			continue
		}
		res, err := lim.Take(context.Background(), l.key, l.cost)
		require.NoError(t, err, what)
		want := []string{strconv.FormatBool(res.Allowed), strconv.FormatInt(res.Remaining, 10), formatSeconds(int64(res.RetryAfter)),
			formatSeconds(int64(res.Delay)), formatSeconds(int64(res.ResetAfter))}
		got := []string{row["allowed"], row["remaining"], row["retry_after"], row["delay"], row["reset_after"]}
		if !assert.Equal(t, want, got, what) {
			return false
		}
	}
	return true
}

// For the token bucket, the CLI allows what golang.org/x/time/rate's
// AllowN allows, on traces whose times are not on refill boundaries (where
// its float arithmetic may round either way).
func TestDecisionsEqualXTimeRate(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	rates := []float64{0.5, 1, 2, 4, 5, 8, 10, 20, 100} // whole nanoseconds per token
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 150 {
		rateFlag := rates[r.IntN(len(rates))]
		burst := 1 + r.Int64N(20)
		empty := r.IntN(2) == 0
		interval := rateLimit(rateFlag, burst).Interval()
		lines, trace := randomTrace(r, 200, burst, interval)
		start := "full"
		if empty {
			start = "empty"
		}
		args := []string{"-rate", strconv.FormatFloat(rateFlag, 'g', -1, 64), "-burst", strconv.FormatInt(burst, 10), "-start", start, "-format", "csv"}
		stdout, stderr, code := runCLI(t, trace, args...)
		require.Equal(t, 0, code, stderr)
		rows := parseCSV(t, stdout)
		require.Len(t, rows, len(lines))

		limiters := make(map[string]*rate.Limiter)
		for _, k := range traceKeys {
			limiters[k] = rate.NewLimiter(rate.Limit(rateFlag), int(burst))
			if empty {
				require.True(t, limiters[k].AllowN(epoch, int(burst)))
			}
		}
		for j, l := range lines {
			want := limiters[l.key].AllowN(epoch.Add(time.Duration(l.t)), int(l.cost))
			if !assert.Equal(t, strconv.FormatBool(want), rows[j]["allowed"], "trace %d (%q) line %d: %s %q %d",
				i, args, j+2, formatSeconds(l.t), l.key, l.cost) {
				return
			}
		}
	}
}

func TestEmptyState(t *testing.T) {
	l := ratelimit.PerSecond(5).WithBurst(10)
	assert.Equal(t, int64(2*time.Second), emptyState(ratelimit.Policy{Limit: l}))
	assert.Equal(t, int64(2*time.Second), emptyState(ratelimit.Policy{Limit: l, Algorithm: ratelimit.LeakyPolice}))
	assert.Equal(t, int64(2200*time.Millisecond), emptyState(ratelimit.Policy{Limit: l, Algorithm: ratelimit.LeakyShape}))
}

func TestKeyStats(t *testing.T) {
	var s keyStats
	for _, a := range []bool{true, false, false, true, false, false, false, true} {
		s.add(a)
	}
	assert.Equal(t, keyStats{requests: 8, allowed: 3, refused: 5, streak: 0, longest: 3}, s)
}
