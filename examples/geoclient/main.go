// Geoclient geocodes place names against the demo server of
// github.com/tokenfair/ratelimit (examples/geocoding) through the library's
// client transport, package pace: it paces its requests to the limits the
// server declares in its answers and retries a 429 after its Retry-After,
// so that it uses the whole quota it is given and gets (almost) no 429.
//
// From the repository root, with the demo running (go run ./examples/geocoding):
//
//	go run ./examples/geoclient paris tokyo atlantis
//	{"query":"paris","status":200,"name":"Paris","lat":48.8566,"lon":2.3522}
//	{"query":"tokyo","status":200,"name":"Tokyo","lat":35.6762,"lon":139.6503}
//	{"query":"atlantis","status":404,"error":"unknown place"}
//	geoclient: 3 names, 2 ok, 1 not found, 0 refused (429 seen), 0 retries, waited 0.0 s
//
// Without names it reads one a line from standard input (blank lines
// skipped, spaces around a name trimmed). Standard output has one JSON
// object a line for each name, in input order: the query, the status, and
// for a 200 the fields of the server's answer; for any other answer the
// server's reason (its problem detail) in "error", and for a name that got
// no answer, the last status seen (0 if none) and why in "error", such as a
// wait longer than -max-wait. The summary line goes to standard error, last:
// "refused" counts the 429 answers received, retried or not; "retries" the
// requests sent again; "waited" is the wall-clock time during which at least
// one name was held back by the transport (for its quota to refill, a
// Retry-After, or the own limit's turn), not a sum over the workers.
//
// # Flags
//
//	-url          the demo server [http://localhost:8080]
//	-key          API key sent as X-API-Key [demo]; empty: none
//	-concurrency  requests in flight at once [4]
//	-max-wait     the longest wait accepted before giving up on a name
//	              [1m]; 0: none at all
//	-rate         an own limit on top of the server's, in requests per
//	              second [0: none]
//	-burst        the own limit's burst [0: -rate, a second's worth]
//
// The exit status is 0 when every name was answered 200 or 404, 1
// otherwise, and 2 for bad flags, named in a message.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/pace"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// config is what the flags say.
type config struct {
	url         string
	key         string
	concurrency int
	maxWait     time.Duration
	rate, burst int64
}

// newFlagSet returns the flag set that fills cfg, with the contract's
// defaults, and writes its errors and usage to w.
func newFlagSet(cfg *config, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("geoclient", flag.ContinueOnError)
	fs.SetOutput(w)
	fs.Usage = func() {
		fmt.Fprintf(w, "Usage: go run ./examples/geoclient [flags] [NAME...]\n\nGeocodes each NAME, or each line of standard input, against the demo server.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.url, "url", "http://localhost:8080", "the demo server's `URL`")
	fs.StringVar(&cfg.key, "key", "demo", "API `key` sent as X-API-Key (empty: none)")
	fs.IntVar(&cfg.concurrency, "concurrency", 4, "requests in flight at once")
	fs.DurationVar(&cfg.maxWait, "max-wait", time.Minute, "the longest `wait` accepted before giving up on a name (0: no wait at all)")
	fs.Int64Var(&cfg.rate, "rate", 0, "an own limit on top of the server's, in requests per second (0: none)")
	fs.Int64Var(&cfg.burst, "burst", 0, "the own limit's burst (0: -rate)")
	return fs
}

// check reports every flag whose value is invalid, one error per flag.
func (c *config) check() error {
	var errs []error
	invalid := func(name, value, want string) {
		errs = append(errs, fmt.Errorf("-%s %s: %s", name, value, want))
	}
	if u, err := url.Parse(c.url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		invalid("url", strconv.Quote(c.url), "want an http:// or https:// URL with a host")
	}
	if n := c.concurrency; n < 1 {
		invalid("concurrency", strconv.Itoa(n), "want at least 1")
	}
	if d := c.maxWait; d < 0 {
		invalid("max-wait", d.String(), "want a duration of 0 or more")
	}
	if c.rate < 0 {
		invalid("rate", strconv.FormatInt(c.rate, 10), "want requests per second, or 0 for no own limit")
	}
	switch {
	case c.burst < 0:
		invalid("burst", strconv.FormatInt(c.burst, 10), "want a capacity of at least 1, or 0 for -rate")
	case c.rate == 0 && c.burst > 0:
		invalid("burst", strconv.FormatInt(c.burst, 10), "needs -rate")
	case c.rate > 0:
		store, err := memorystore.New(nil)
		if err == nil {
			_, err = ratelimit.New(store, ratelimit.Policy{Name: "own", Limit: c.limit()})
		}
		if err != nil {
			invalid("rate", fmt.Sprintf("%d -burst %d", c.rate, c.burst), err.Error())
		}
	}
	return errors.Join(errs...)
}

// limit returns the own limit of -rate and -burst: none without -rate, a
// burst of -rate (PerSecond's) without -burst.
func (c *config) limit() ratelimit.Limit {
	if c.rate == 0 {
		return ratelimit.Limit{}
	}
	l := ratelimit.PerSecond(c.rate)
	if c.burst > 0 {
		l = l.WithBurst(c.burst)
	}
	return l
}

// options returns the pace.Options of the flags. A -max-wait of 0 is no
// wait at all, pace's negative MaxWait.
func (c *config) options() *pace.Options {
	opts := &pace.Options{MaxWait: c.maxWait, Limit: c.limit()}
	if opts.MaxWait == 0 {
		opts.MaxWait = -1
	}
	return opts
}

// run is the whole program: it parses args, geocodes the names they give
// or, without, the lines of stdin, writes a line a name to stdout and the
// summary to stderr, and returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var cfg config
	fs := newFlagSet(&cfg, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // the flag package said why, and the usage
	}
	if err := cfg.check(); err != nil {
		report(stderr, err)
		return 2
	}
	names := fromArgs(fs.Args())
	if fs.NArg() == 0 {
		names = fromLines(stdin)
	}
	g := newGeocoder(cfg)
	defer g.close()
	sum, err := g.all(ctx, names, stdout, cfg.concurrency)
	if err != nil {
		report(stderr, err)
	}
	fmt.Fprintf(stderr, "geoclient: %d names, %d ok, %d not found, %d refused (429 seen), %d retries, waited %.1f s\n",
		sum.names, sum.ok, sum.notFound, sum.refused, sum.retries, g.waits.total().Seconds())
	if err != nil || sum.ok+sum.notFound < sum.names {
		return 1
	}
	return 0
}

// report writes err to w, one "geoclient: " line per line of its text.
func report(w io.Writer, err error) {
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintln(w, "geoclient:", line)
	}
}
