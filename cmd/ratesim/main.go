// Ratesim replays a trace of requests, or a web server's access log,
// against one rate-limiting policy and prints each decision: which requests
// the limiter would allow, which it would refuse, and for how long. Its
// decisions are those of github.com/tokenfair/ratelimit, made by the same
// function the library's stores call.
//
// Usage, from the repository root (TRACE is a file, or standard input when
// it is absent or "-"):
//
//	go run ./cmd/ratesim [flags] [TRACE]
//
// A trace has one request a line, "TIME [KEY [COST]]", TIME in seconds
// from the start. The classic exercise, a bucket that refills at 2 tokens a
// second, holds 5 and is empty at time 0, with ten requests at T = 3 s,
// prints a table of the ten decisions and, on standard error, the summary:
//
//	yes 3 | head -n 10 | go run ./cmd/ratesim -rate 2 -burst 5 -start empty
//	ratesim: 10 requests: 5 allowed, 5 denied
//
// With -algorithm daily or monthly, the policy is a quota of -burst
// requests per calendar day or month in the zone -tz, and -t0 is the
// wall-clock time of time 0.
//
// docs/ratesim.md describes the traces, access logs, output formats and
// pictures; -h lists the flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	_ "time/tzdata" // -tz resolves on a machine without a zoneinfo database
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
