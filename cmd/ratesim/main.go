// Ratesim replays a trace of requests, or a web server's access log,
// against one rate-limiting policy and prints each decision: which requests
// the limiter would allow, which it would refuse, and for how long. Its
// decisions are those of github.com/tokenfair/ratelimit, made by the same
// function the library's stores call.
//
// From the repository root:
//
//	go run ./cmd/ratesim [flags] [TRACE]
//
// TRACE is a file, or standard input when it is absent or "-".
//
// The classic exercise: a bucket that refills at 2 tokens a second, holds
// 5, and is empty at time 0; ten requests arrive at T = 3 s:
//
//	yes 3 | head -n 10 | go run ./cmd/ratesim -rate 2 -burst 5 -start empty
//	        time  result    cost  remaining  retry_after      delay  key
//	           3  allowed      1          4            -          -  default
//	...
//	           3  allowed      1          0            -          -  default
//	           3  DENIED       1          0          0.5          -  default
//	...
//	ratesim: 10 requests: 5 allowed, 5 denied
//
// # Trace
//
// One request a line, "TIME [KEY [COST]]", fields separated by spaces or
// tabs:
//
//   - TIME is in seconds from the start, an exact decimal ("3", "0.2",
//     "1.000000001", ".5" and "2." are accepted): it is read to the
//     nanosecond without a float, and digits after the ninth decimal must
//     be zeros. Times must not decrease, and must not exceed 1e9 seconds
//     (about 31.7 years). There is no sign and no exponent.
//   - KEY identifies the client (default "default"); it cannot contain
//     blanks.
//   - COST is a whole number of tokens (default 1). A cost of 0 reports the
//     bucket without spending; a cost above the burst is refused, with a
//     retry_after of 0, by every algorithm: it can never pass.
//
// Blank lines, and lines whose first non-blank character is '#', are
// skipped. A malformed line is an error that names its number, such as
// "ratesim: line 7: time "1e3": not a decimal number of seconds"; ratesim
// then exits with status 2 (or, with -skip-bad, skips it and says so at the
// end).
//
// # Access logs
//
// With -log common or -log combined, the input is an Apache or nginx access
// log in the Common Log Format,
//
//	127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326
//
// or the Combined Log Format, which adds "referer" "user-agent". Each line
// is a request of cost 1 at its timestamp, counted from the first line's
// (timestamps have one-second resolution, so requests within the same
// second arrive together, which is burstier than they really were). The key
// is the client address, or the field chosen with -key-field: host, ident,
// user, request (the whole request line), path (the request's target
// without its query string: "/geocode" for "GET /geocode?q=x HTTP/1.1"),
// status, or, in the Combined format, referer or user-agent. A field that
// is empty or absent is keyed as "-". Quoted fields end at the first '"'
// not escaped by a backslash and are used as written (nothing is
// unescaped). Anything after the last field is ignored, so a Combined log
// can be read as Common, and formats that append fields are accepted.
//
// Servers write a line when the request completes, so a log is often
// slightly out of order. A line earlier than the latest time seen so far is
// replayed at that time; at the end ratesim says how many lines were late
// and by how much at most.
//
// # Starting full or empty
//
// With -start full (the default) every key's bucket is full at time 0, and
// a key's bucket is full when the key is first seen, as in the library. With
// -start empty every key's bucket is empty at time 0 and refills from then
// on, also for keys first seen later: a key first seen at time t has
// min(t × rate, burst) whole tokens. For leaky-shape, "empty" means the
// queue has no room at time 0: the state the library leaves after a queue
// filled to its last place at time 0, with room for one more request every
// interval from then on. Time 0 is the trace's time 0, or the first line of
// an access log. The interval of the rate is 1 s / rate rounded to the
// nanosecond: ratelimit.PerSecond(rate) for a whole rate, one token per
// interval otherwise.
//
// # Output
//
// Standard output has one line per request: with -format table (the
// default) aligned columns for people, with refusals marked DENIED, "-"
// where a retry_after or delay does not apply, "never" as the retry_after
// of a cost above the burst, and the key last so that no key can break the
// alignment; with -format csv a header row, then one row per request with
// the columns
//
//	time,key,cost,allowed,remaining,retry_after,delay,reset_after
//
// (allowed is true or false; remaining is the whole tokens left after the
// decision, also on a refusal; retry_after, delay and reset_after are in
// seconds, exact decimals, 0 when they do not apply); with -format json
// one object per line with the same fields, seconds as JSON numbers.
//
// Standard error gets the summary: first the line
//
//	ratesim: 10 requests: 5 allowed, 5 denied
//
// then notices about late or skipped lines, then a table of the keys with
// the most refusals (requests, allowed, refused, refusal rate, longest run
// of refusals in a row), at most -top of them, ordered by refusals, then
// requests, then key.
//
// # Picture
//
// -plot FILE.svg draws, for each of the -plot-top busiest keys or each key
// named with -plot-key, the level of its bucket over time (tokens for the
// token bucket, water for the policing leaky bucket, requests queued for the
// shaping one) with its allowed requests as green dots and its refused ones
// as red crosses. Finding the busiest keys needs a first pass over the
// input: a file is read twice, and standard input is copied to a temporary
// file, removed at the end. With -plot-key (which excludes -plot-top)
// there is a single pass. A key with many requests is drawn in at most 2000
// time bins, each mark then standing for one or more requests, so memory
// stays bounded. A failed replay leaves no picture behind.
//
// # Exit status
//
// 0 on success; 2 for invalid flags or a malformed line of input; 1 when
// reading the input or writing an output fails.
//
// # Flags
//
//	-algorithm   token-bucket|leaky-police|leaky-shape [token-bucket]
//	-rate        tokens earned per second [5]
//	-burst       bucket capacity [10]
//	-start       full|empty [full]
//	-format      table|csv|json [table]
//	-log         common|combined: read an access log instead of a trace
//	-key-field   with -log: host|ident|user|request|path|status|referer|user-agent [host]
//	-skip-bad    skip malformed lines instead of stopping at the first
//	-top         keys in the per-key summary, by refusals; 0 for none [20]
//	-plot        write a picture of the busiest keys' buckets to this SVG file
//	-plot-key    a key to draw (repeat the flag for more); default: the busiest
//	-plot-top    how many of the busiest keys to draw [3]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

// Exit statuses.
const (
	exitOK    = 0
	exitIO    = 1 // reading the input or writing an output failed
	exitUsage = 2 // invalid flags or malformed input
)

// choice is a flag whose value is one of a fixed list.
type choice struct {
	value   string
	choices []string
}

func (c *choice) String() string { return c.value }

func (c *choice) Set(s string) error {
	if !slices.Contains(c.choices, s) {
		return fmt.Errorf("want %s", orList(c.choices))
	}
	c.value = s
	return nil
}

// orList returns "a, b or c".
func orList(vs []string) string {
	if len(vs) < 2 {
		return strings.Join(vs, "")
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " or " + vs[len(vs)-1]
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	return replay(cfg, stdin, stdout, stderr)
}

// errorf reports an error on stderr, prefixed with the program's name.
func errorf(stderr io.Writer, format string, args ...any) {
	fmt.Fprintf(stderr, "ratesim: "+format+"\n", args...)
}
