// Command benchtable turns the CSV output of benchstat into the headline
// Markdown tables of BENCHMARKS.md: decisions in memory, HTTP and Redis. A
// scenario is a benchmark name less its last element (Decision/one-key), a
// peer the last element; each figure comes with its ratio to ours.
//
//	benchstat -format csv results.txt | go run ./internal/benchtable
package main

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ours is the peer every ratio is taken against.
const ours = "tokenfair"

// baselines are the rows that are no limiter but the floor of their group
// (a bare Redis INCR, a bare read of the clock): a group that has one gets
// a second ratio column, to it.
var baselines = []string{"incr", "clock"}

// A stat is benchstat's summary of one metric: the median and the 95%
// confidence interval around it, as benchstat prints it.
type stat struct {
	v  float64
	ci string
}

type result map[string]stat // by unit

type table struct {
	peers   []string
	results map[string]result // by peer
}

func main() {
	groups, order, err := read(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	write(w, groups, order)
}

// write writes the three headline tables.
func write(w io.Writer, groups map[string]*table, order []string) {
	section(w, "Decisions in memory", groups, order, func(g string) bool {
		return strings.HasPrefix(g, "Decision/") || g == "BytesPerKey"
	}, true)
	if t, ok := groups["HTTP"]; ok {
		detail(w, "HTTP", t)
	}
	section(w, "Redis", groups, order, func(g string) bool { return strings.HasPrefix(g, "Redis") }, false)
}

// section writes one table of the groups that match: a row per peer, a
// column per group with the primary metric and its ratio to ours (the
// value alone where the group has no row of ours), and, with allocs, the
// most allocations per operation of the peer's timed groups.
func section(w io.Writer, title string, groups map[string]*table, order []string, match func(string) bool, allocs bool) {
	var gs, peers []string
	for _, g := range order {
		if !match(g) {
			continue
		}
		gs = append(gs, g)
		for _, p := range groups[g].peers {
			if !slices.Contains(peers, p) {
				peers = append(peers, p)
			}
		}
	}
	if len(gs) == 0 {
		return
	}
	fmt.Fprintf(w, "### %s\n\n", title)
	fmt.Fprint(w, "| peer |")
	for _, g := range gs {
		fmt.Fprintf(w, " %s (%s) |", g, label(primary(groups[g])))
	}
	if allocs {
		fmt.Fprint(w, " allocs/op |")
	}
	fmt.Fprint(w, "\n|---|")
	for range gs {
		fmt.Fprint(w, "---:|")
	}
	if allocs {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, p := range peers {
		fmt.Fprintf(w, "| %s |", p)
		most, any := 0.0, false
		for _, g := range gs {
			t := groups[g]
			u := primary(t)
			if s, ok := t.results[p][u]; !ok {
				fmt.Fprint(w, " — |")
			} else if r := ratio(t, ours, p, u); r == "—" {
				fmt.Fprintf(w, " %s |", format(s.v, u))
			} else {
				fmt.Fprintf(w, " %s (%s) |", format(s.v, u), r)
			}
			if s, ok := t.results[p]["allocs/op"]; ok && u == "sec/op" {
				most, any = max(most, s.v), true
			}
		}
		if allocs {
			if any {
				fmt.Fprintf(w, " %s |", format(most, "allocs/op"))
			} else {
				fmt.Fprint(w, " — |")
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

var procs = regexp.MustCompile(`-\d+$`)

// read parses benchstat's CSV: sections that start with a row naming the
// unit (",sec/op,CI") followed by one row per benchmark.
func read(r io.Reader) (map[string]*table, []string, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	groups := map[string]*table{}
	var order []string
	unit := ""
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return groups, order, nil
		}
		if err != nil {
			return nil, nil, err
		}
		if len(rec) < 2 {
			continue // the goos/goarch/pkg/cpu lines
		}
		if rec[0] == "" {
			if len(rec) >= 3 && rec[2] == "CI" {
				unit = rec[1]
			}
			continue
		}
		name := procs.ReplaceAllString(rec[0], "")
		i := strings.LastIndexByte(name, '/')
		if i < 0 || unit == "" {
			continue // geomean and the like
		}
		v, err := strconv.ParseFloat(rec[1], 64)
		if err != nil {
			continue
		}
		g, peer := name[:i], name[i+1:]
		t := groups[g]
		if t == nil {
			t = &table{results: map[string]result{}}
			groups[g] = t
			order = append(order, g)
		}
		if t.results[peer] == nil {
			t.results[peer] = result{}
			t.peers = append(t.peers, peer)
		}
		ci := ""
		if len(rec) > 2 {
			ci = rec[2]
		}
		t.results[peer][unit] = stat{v, ci}
	}
}

// primary returns the unit a group is compared by: bytes/key for the heap
// benchmark, else time.
func primary(t *table) string {
	for _, r := range t.results {
		if _, ok := r["bytes/key"]; ok {
			return "bytes/key"
		}
	}
	return "sec/op"
}

// detail writes a group's table: every metric, the primary one with its
// confidence interval, and the ratio of the primary metric to ours.
func detail(w io.Writer, g string, t *table) {
	u := primary(t)
	units := []string{u}
	if u == "sec/op" {
		for _, extra := range []string{"round-trips/op", "redis-commands/op", "B/op", "allocs/op"} {
			for _, r := range t.results {
				if _, ok := r[extra]; ok {
					units = append(units, extra)
					break
				}
			}
		}
	}
	fmt.Fprintf(w, "### %s\n\n| peer |", g)
	for _, unit := range units {
		fmt.Fprintf(w, " %s |", label(unit))
	}
	fmt.Fprintf(w, " ratio to ours (%s) |", label(u))
	baseline := ""
	for _, b := range baselines {
		if _, ok := t.results[b]; ok {
			baseline = b
		}
	}
	hasBase := baseline != ""
	if hasBase {
		fmt.Fprintf(w, " ratio to %s (%s) |", baseline, label(u))
	}
	fmt.Fprint(w, "\n|---|")
	for range units {
		fmt.Fprint(w, "---:|")
	}
	if hasBase {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w, "---:|")
	for _, p := range t.peers {
		fmt.Fprintf(w, "| %s |", p)
		for _, unit := range units {
			s, ok := t.results[p][unit]
			switch {
			case !ok:
				fmt.Fprint(w, " — |")
			case unit != u || s.ci == "" || s.ci == "∞":
				fmt.Fprintf(w, " %s |", format(s.v, unit))
			default:
				fmt.Fprintf(w, " %s ± %s |", format(s.v, unit), s.ci)
			}
		}
		fmt.Fprintf(w, " %s |", ratio(t, ours, p, u))
		if hasBase {
			fmt.Fprintf(w, " %s |", ratio(t, baseline, p, u))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

func label(unit string) string {
	if unit == "sec/op" {
		return "ns/op"
	}
	return unit
}

func format(v float64, unit string) string {
	switch unit {
	case "sec/op":
		return strconv.FormatFloat(v*1e9, 'f', digits(v*1e9), 64)
	case "B/op", "allocs/op":
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'f', digits(v), 64)
	}
}

// digits returns the decimals that show v to three significant figures,
// or two below 1, and below 0.1 as many as two significant figures take
// (0.0013 round trips per decision, not 0.00).
func digits(v float64) int {
	switch a := math.Abs(v); {
	case a >= 100:
		return 0
	case a >= 10:
		return 1
	case a >= 0.1 || a == 0:
		return 2
	default:
		return 1 - int(math.Floor(math.Log10(a)))
	}
}

// ratio returns p's value of unit over base's, as "1.23×".
func ratio(t *table, base, p, unit string) string {
	o, ok1 := t.results[base][unit]
	s, ok2 := t.results[p][unit]
	if !ok1 || !ok2 || o.v == 0 {
		return "—"
	}
	r := s.v / o.v
	return strconv.FormatFloat(r, 'f', digits(r), 64) + "×"
}
