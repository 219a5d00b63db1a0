package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/tokenfair/ratelimit"
)

// config holds the settings, one field per flag.
type config struct {
	algorithm choice
	rate      float64
	burst     int64
	start     choice
	format    choice
	log       choice
	keyField  choice
	skipBad   bool
	top       int
	plot      string
	plotKeys  []string
	plotTop   int
	t0        string
	tz        string
	input     string // TRACE: a file name, or "" or "-" for standard input

	policy ratelimit.Policy // built from algorithm, rate and burst (or, for a quota, burst and tz)
	epoch  int64            // for a quota, time 0 in Unix nanoseconds (-t0); 0 for a rate
}

// parseFlags parses args, reporting any problem on stderr. It returns
// flag.ErrHelp for -h.
func parseFlags(args []string, stderr io.Writer) (*config, error) {
	cfg := &config{
		algorithm: choice{"token-bucket", append([]string{"token-bucket", "leaky-police", "leaky-shape"}, quotaAlgorithms...)},
		start:     choice{"full", []string{"full", "empty"}},
		format:    choice{"table", formats},
		log:       choice{"", []string{"common", "combined"}},
		keyField:  choice{"host", keyFields},
	}
	fs := flag.NewFlagSet("ratesim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(&cfg.algorithm, "algorithm", "the `algorithm`: token-bucket, leaky-police, leaky-shape, or daily or monthly (a calendar quota of -burst)")
	fs.Float64Var(&cfg.rate, "rate", 5, "tokens earned per second; the interval is 1s/rate rounded to the nanosecond (not with a quota)")
	fs.Int64Var(&cfg.burst, "burst", 10, "bucket capacity: the most tokens that can be spent at once; for daily and monthly, the quota")
	fs.StringVar(&cfg.t0, "t0", defaultT0, "for daily and monthly, the wall-clock `time` of time 0 in -tz, such as 2026-03-28T00:00:00, or with an offset (+01:00); with -log, the first line's timestamp")
	fs.StringVar(&cfg.tz, "tz", "UTC", "for daily and monthly, the IANA time `zone` whose midnights reset the quota, such as Europe/Paris")
	fs.Var(&cfg.start, "start", "`state` of every key's bucket at time 0, also for keys first seen later: full or empty")
	fs.Var(&cfg.format, "format", "output `format`: table, csv or json (one object per line)")
	fs.Var(&cfg.log, "log", "read an access log in this `format` instead of a trace: common or combined (as Apache and nginx write them)")
	fs.Var(&cfg.keyField, "key-field", "with -log, the `field` that keys a bucket: host, ident, user, request, path, status, referer or user-agent")
	fs.BoolVar(&cfg.skipBad, "skip-bad", false, "skip malformed lines, and count them, instead of stopping at the first")
	fs.IntVar(&cfg.top, "top", 20, "show this many keys, those with the most refusals, in the summary on standard error; 0 for none")
	fs.StringVar(&cfg.plot, "plot", "", "draw the buckets of the busiest keys in this SVG `file`")
	fs.Func("plot-key", "with -plot, draw this `key` (repeat the flag for more) instead of the busiest keys", func(s string) error {
		if s == "" {
			return errors.New("empty key")
		}
		if !slices.Contains(cfg.plotKeys, s) {
			cfg.plotKeys = append(cfg.plotKeys, s)
		}
		return nil
	})
	fs.IntVar(&cfg.plotTop, "plot-top", 3, "with -plot, draw this many of the busiest keys")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: ratesim [flags] [TRACE]

Ratesim replays a trace (the file TRACE, or standard input) against one rate
limit and prints each decision; a summary goes to standard error. A trace has
one request a line, "TIME [KEY [COST]]": TIME in seconds from the start (an
exact decimal, not decreasing), KEY (default "default"), COST (default 1).
Blank lines and lines starting with # are skipped.

  yes 3 | head -n 10 | ratesim -rate 2 -burst 5 -start empty   # 5 allowed, 5 denied
  ratesim -log combined -key-field host -rate 1 -burst 20 -format csv access.log
  ratesim -plot buckets.svg trace.txt > /dev/null
  ratesim -algorithm daily -burst 2500 -tz Europe/Paris -t0 2026-03-28 trace.txt

With -start empty a bucket is empty at time 0 and refills from then on, so
a key first seen at time t has min(t*rate, burst) tokens; for leaky-shape,
the queue has no room at time 0; for daily and monthly, the quota is used
up at time 0 and comes back at the next reset. A cost above the burst is
always refused.
Exit status: 0 on success, 2 for invalid flags or a malformed line, 1 when
reading or writing fails.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	fail := func(format string, args ...any) (*config, error) {
		err := fmt.Errorf(format, args...)
		errorf(stderr, "%v", err)
		fmt.Fprintln(stderr, "Run 'ratesim -h' for usage.")
		return nil, err
	}
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	quota := slices.Contains(quotaAlgorithms, cfg.algorithm.value)
	var loc *time.Location
	if set["tz"] || quota {
		var err error
		if loc, err = loadZone(cfg.tz); err != nil {
			return fail("%v", err)
		}
	}
	switch {
	case fs.NArg() > 1:
		return fail("want at most one TRACE file, got %d arguments", fs.NArg())
	case !quota && (set["t0"] || set["tz"]):
		return fail("-t0 and -tz need -algorithm daily or monthly: a rate has no calendar")
	case quota && set["rate"]:
		return fail("-rate with -algorithm %s: a quota earns no tokens by the second; -burst is its size", cfg.algorithm.value)
	case quota && cfg.plot != "":
		return fail("-plot with -algorithm %s: the picture draws the buckets of rates; the remaining column shows the quota left", cfg.algorithm.value)
	case quota && set["t0"] && cfg.log.value != "":
		return fail("-t0 with -log: time 0 is the first line's timestamp")
	case math.IsNaN(cfg.rate) || math.IsInf(cfg.rate, 0) || cfg.rate <= 0:
		return fail("-rate %s: want a positive, finite number of tokens per second", strconv.FormatFloat(cfg.rate, 'g', -1, 64))
	case float64(time.Second)/cfg.rate >= math.MaxInt64:
		return fail("-rate %s: one token every %.3g s, more than 50 years",
			strconv.FormatFloat(cfg.rate, 'g', -1, 64), 1/cfg.rate)
	case cfg.burst < 1:
		return fail("-burst %d: want a capacity of at least 1", cfg.burst)
	case cfg.top < 0:
		return fail("-top %d: want a number of keys, or 0 for none", cfg.top)
	case cfg.plotTop < 1:
		return fail("-plot-top %d: want at least 1", cfg.plotTop)
	case set["key-field"] && cfg.log.value == "":
		return fail("-key-field needs -log: a trace names its keys")
	case (cfg.keyField.value == "referer" || cfg.keyField.value == "user-agent") && cfg.log.value != "combined":
		return fail("-key-field %s needs -log combined", cfg.keyField.value)
	case (set["plot-key"] || set["plot-top"]) && cfg.plot == "":
		return fail("-plot-key and -plot-top need -plot")
	case set["plot-key"] && set["plot-top"]:
		return fail("-plot-key and -plot-top exclude each other")
	}
	cfg.input = fs.Arg(0)
	if quota {
		t0, err := parseT0(cfg.t0, loc)
		if err != nil {
			return fail("%v", err)
		}
		cfg.epoch = t0.UnixNano()
		return cfg.newPolicy(ratelimit.Policy{Limit: quotaLimit(cfg.algorithm.value, cfg.burst, loc)}, fail)
	}
	var alg ratelimit.Algorithm
	if err := alg.UnmarshalText([]byte(cfg.algorithm.value)); err != nil {
		return fail("-algorithm: %v", err)
	}
	limit := rateLimit(cfg.rate, cfg.burst)
	if limit.Interval() == 0 {
		return fail("-rate %s: more than one token per nanosecond", strconv.FormatFloat(cfg.rate, 'g', -1, 64))
	}
	return cfg.newPolicy(ratelimit.Policy{Limit: limit, Algorithm: alg}, fail)
}

// newPolicy validates p and sets cfg.policy to it, with its defaults; or
// reports why p is invalid through fail.
func (cfg *config) newPolicy(p ratelimit.Policy, fail func(string, ...any) (*config, error)) (*config, error) {
	// New validates the policy and fills in its defaults; the simulator
	// decides with the policy itself and never calls the store.
	lim, err := ratelimit.New(noStore{}, p)
	if err != nil {
		if isQuota(p) {
			return fail("-burst %d: %v", cfg.burst, err)
		}
		return fail("-rate %s -burst %d: %v", strconv.FormatFloat(cfg.rate, 'g', -1, 64), cfg.burst, err)
	}
	cfg.policy = lim.Policies()[0]
	return cfg, nil
}

// rateLimit returns the Limit of r tokens per second with the given burst.
// Its interval is 1s/r rounded to the nearest nanosecond: for a whole r up
// to 10⁶, PerSecond(r), which also reads as "5/s"; otherwise one token per
// interval, which the library takes however far the rounding is from r. A
// rate above one token per nanosecond has an interval of 0.
func rateLimit(r float64, burst int64) ratelimit.Limit {
	if r == math.Trunc(r) && r <= 1e6 {
		return ratelimit.PerSecond(int64(r)).WithBurst(burst)
	}
	iv := math.Round(float64(time.Second) / r)
	if iv >= math.MaxInt64 {
		// Slower than one token in 292 years: invalid with any burst,
		// and New says why.
		return ratelimit.Per(1, math.MaxInt64).WithBurst(burst)
	}
	return ratelimit.Per(1, time.Duration(iv)).WithBurst(burst)
}

// noStore is the store of the Limiter that parseFlags builds only to
// validate the policy; it is never called.
type noStore struct{}

func (noStore) Take(context.Context, *ratelimit.Policy, string, int64) (ratelimit.Result, error) {
	return ratelimit.Result{}, errors.New("ratesim: noStore.Take called")
}
