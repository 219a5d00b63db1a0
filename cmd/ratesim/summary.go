package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// keyStats counts the decisions for one key, or for all of them.
type keyStats struct {
	requests, allowed, refused int64
	streak, longest            int64 // refusals in a row: now, and the most
}

func (s *keyStats) add(allowed bool) {
	s.requests++
	if allowed {
		s.allowed++
		s.streak = 0
		return
	}
	s.refused++
	s.streak++
	s.longest = max(s.longest, s.streak)
}

// totalLine is the first line of the summary: the counts of allowed and
// denied requests, "ratesim: 10 requests: 5 allowed, 5 denied".
func totalLine(t keyStats) string {
	return fmt.Sprintf("ratesim: %d %s: %d allowed, %d denied\n", t.requests, plural(t.requests, "request", "requests"), t.allowed, t.refused)
}

// plural returns one when n is 1, else many.
func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// byRefusals orders keys by refusals, most first, then by requests, most
// first, then by name.
func byRefusals(a, b *keyState) int {
	return cmp.Or(
		cmp.Compare(b.stats.refused, a.stats.refused),
		cmp.Compare(b.stats.requests, a.stats.requests),
		strings.Compare(a.name, b.name))
}

// writeKeyTable writes the per-key summary of the top keys by refusals:
// requests, allowed, refused, refusal rate and longest refusal streak.
func writeKeyTable(w io.Writer, keys map[string]*keyState, top int) error {
	if top <= 0 || len(keys) == 0 {
		return nil
	}
	all := make([]*keyState, 0, len(keys))
	for _, ks := range keys {
		all = append(all, ks)
	}
	slices.SortFunc(all, byRefusals)
	shown := all[:min(top, len(all))]

	head := []string{"key", "requests", "allowed", "refused", "refusal rate", "longest refusal streak"}
	rows := [][]string{head}
	for _, ks := range shown {
		st := ks.stats
		rows = append(rows, []string{
			printable(ks.name),
			strconv.FormatInt(st.requests, 10),
			strconv.FormatInt(st.allowed, 10),
			strconv.FormatInt(st.refused, 10),
			strconv.FormatFloat(100*float64(st.refused)/float64(st.requests), 'f', 1, 64) + "%",
			strconv.FormatInt(st.longest, 10),
		})
	}
	widths := make([]int, len(head))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	if len(all) > len(shown) {
		fmt.Fprintf(&b, "top %d of %d keys by refusals (-top to show more):\n", len(shown), len(all))
	}
	for _, r := range rows {
		for i, c := range r {
			switch {
			case i == 0:
				b.WriteString(c)
				b.WriteString(strings.Repeat(" ", widths[0]-utf8.RuneCountInString(c)))
			default:
				b.WriteString("  ")
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)))
				b.WriteString(c)
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// printable returns key with control characters and invalid UTF-8 escaped,
// so that a key cannot break a terminal's table.
func printable(key string) string {
	for _, r := range key {
		if r < ' ' || r == 0x7f || r == '\uFFFD' {
			q := strconv.QuoteToGraphic(key)
			return q[1 : len(q)-1]
		}
	}
	return key
}
