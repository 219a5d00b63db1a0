package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// svgElement is an element of a parsed picture.
type svgElement struct {
	name  string
	attrs map[string]string
	text  string
	panel string // data-key of the enclosing panel
}

// parseSVG parses a picture as strict XML and returns its elements.
func parseSVG(t *testing.T, data []byte) []svgElement {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.Strict = true
	var (
		elems []svgElement
		stack []int
		panel string
	)
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "the picture is well-formed XML")
		switch tok := tok.(type) {
		case xml.StartElement:
			e := svgElement{name: tok.Name.Local, attrs: make(map[string]string)}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			if e.attrs["class"] == "panel" {
				panel = e.attrs["data-key"]
			}
			e.panel = panel
			elems = append(elems, e)
			stack = append(stack, len(elems)-1)
			if len(elems) == 1 {
				require.Equal(t, "svg", tok.Name.Local)
				require.Equal(t, "http://www.w3.org/2000/svg", tok.Name.Space)
			}
		case xml.CharData:
			if len(stack) > 0 {
				elems[stack[len(stack)-1]].text += string(tok)
			}
		case xml.EndElement:
			if elems[stack[len(stack)-1]].attrs["class"] == "panel" {
				panel = ""
			}
			stack = stack[:len(stack)-1]
		}
	}
	require.NotEmpty(t, elems)
	return elems
}

// count returns how many elements of class there are in each panel.
func count(elems []svgElement, class string) map[string]int {
	m := make(map[string]int)
	for _, e := range elems {
		if e.attrs["class"] == class {
			m[e.panel]++
		}
	}
	return m
}

func texts(elems []svgElement) string {
	var b strings.Builder
	for _, e := range elems {
		b.WriteString(e.text)
		b.WriteByte('\n')
	}
	return b.String()
}

// The picture of the committed trace parses as XML and shows, for each of
// the busiest keys, its level and one mark per request.
func TestPlot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.svg")
	_, stderr, code := runCLI(t, "", "-plot", path, "-plot-top", "2", "testdata/burst.trace")
	require.Equal(t, 0, code, stderr)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	elems := parseSVG(t, data)

	assert.Equal(t, map[string]int{"alice": 1, "bob": 1}, count(elems, "panel"), "the two busiest keys")
	assert.Equal(t, map[string]int{"alice": 1, "bob": 1}, count(elems, "level"))
	assert.Equal(t, map[string]int{"alice": 65, "bob": 28}, count(elems, "allowed"))
	assert.Equal(t, map[string]int{"": 1, "alice": 9, "bob": 7}, count(elems, "refused"), "the legend's cross and one per refusal")
	all := texts(elems)
	assert.Contains(t, all, "ratesim: token-bucket, 5/s burst 10, buckets full at time 0")
	assert.Contains(t, all, `key "alice": 74 requests, 65 allowed, 9 refused`)
	assert.Contains(t, all, `key "bob": 35 requests, 28 allowed, 7 refused (at most 5 in a row)`)
	for _, want := range []string{"tokens in the bucket", "allowed", "refused", "capacity (10)", "time (s)", "0", "10", "14"} {
		assert.Contains(t, all, want)
	}

	// The committed sample is what this version draws.
	_, stderr, code = runCLI(t, "", "-plot", path, "testdata/burst.trace")
	require.Equal(t, 0, code, stderr)
	data, err = os.ReadFile(path)
	require.NoError(t, err)
	golden(t, "../../../docs/ratesim-example.svg", string(data))
}

// The level is exact: it drops by the cost at each allowed request and
// refills at the rate in between, up to the burst.
func TestPlotLevel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.svg")
	// 1 token a second, burst 4: two requests at 0 (level 4 → 2), one at
	// 1 s (refilled to 3 → 2), full again at 3 s, one at 4 s (4 → 3); the
	// time axis ends at 4.5 s.
	_, stderr, code := runCLI(t, "0\n0\n1\n4\n", "-rate", "1", "-burst", "4", "-plot", path)
	require.Equal(t, 0, code, stderr)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var level svgElement
	for _, e := range parseSVG(t, data) {
		if e.attrs["class"] == "level" {
			level = e
		}
	}
	// The first panel's plot area: x from 72 to 72 + 864, y from 112 + 168
	// (level 0) up to 112 (level 4).
	pt := func(t, l float64) string { return formatCoord(72+t/4.5*864) + "," + formatCoord(112+168*(1-l/4)) }
	assert.Equal(t, []string{pt(0, 4), pt(0, 3), pt(0, 2), pt(1, 3), pt(1, 2), pt(3, 4), pt(4, 4), pt(4, 3), pt(4.5, 3.5)},
		strings.Fields(level.attrs["points"]))
}

func formatCoord(f float64) string { return (&svgWriter{}).num(f) }

// Standard input is read twice to find the busiest keys: it is copied to a
// temporary file first. -plot-key draws the keys named, in one pass.
func TestPlotStdinAndKeys(t *testing.T) {
	trace, err := os.ReadFile("testdata/burst.trace")
	require.NoError(t, err)
	dir := t.TempDir()
	fromFile, fromStdin := filepath.Join(dir, "f.svg"), filepath.Join(dir, "s.svg")
	out1, _, code := runCLI(t, "", "-plot", fromFile, "-format", "csv", "testdata/burst.trace")
	require.Equal(t, 0, code)
	out2, _, code := runCLI(t, string(trace), "-plot", fromStdin, "-format", "csv")
	require.Equal(t, 0, code)
	assert.Equal(t, out1, out2)
	a, err := os.ReadFile(fromFile)
	require.NoError(t, err)
	b, err := os.ReadFile(fromStdin)
	require.NoError(t, err)
	assert.Equal(t, string(a), string(b))

	keys := filepath.Join(dir, "k.svg")
	_, stderr, code := runCLI(t, string(trace), "-plot", keys, "-plot-key", "carol", "-plot-key", "nobody", "-plot-key", "a<b&\"c\"")
	require.Equal(t, 0, code, stderr)
	data, err := os.ReadFile(keys)
	require.NoError(t, err)
	elems := parseSVG(t, data)
	assert.Equal(t, map[string]int{"carol": 1, "nobody": 1, "a<b&\"c\"": 1}, count(elems, "panel"))
	assert.Equal(t, map[string]int{"carol": 8}, count(elems, "allowed"))
	assert.Contains(t, texts(elems), `key "nobody": no requests`)
	assert.Contains(t, stderr, "ratesim: -plot-key \"nobody\": no requests with this key\n")

	// A failed replay leaves no picture behind.
	failed := filepath.Join(dir, "failed.svg")
	_, _, code = runCLI(t, "0\nx\n", "-plot", failed)
	assert.Equal(t, 2, code)
	assert.NoFileExists(t, failed)
}

func TestPlotShapeAndPolice(t *testing.T) {
	for alg, title := range map[string]string{"leaky-shape": "requests queued", "leaky-police": "water in the bucket"} {
		path := filepath.Join(t.TempDir(), "p.svg")
		_, stderr, code := runCLI(t, "", "-algorithm", alg, "-start", "empty", "-plot", path, "testdata/burst.trace")
		require.Equal(t, 0, code, stderr)
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		elems := parseSVG(t, data)
		assert.Contains(t, texts(elems), title)
		assert.Len(t, count(elems, "level"), 3)
	}
}

// A key with many requests is drawn in bounded bins, each mark standing for
// one or more requests, and the picture still parses.
func TestPlotManyRequests(t *testing.T) {
	var b strings.Builder
	for i := range 50000 {
		b.WriteString(formatSeconds(int64(i) * 7e6))
		b.WriteString(" hot\n")
	}
	path := filepath.Join(t.TempDir(), "p.svg")
	_, stderr, code := runCLI(t, b.String(), "-plot", path, "-top", "0")
	require.Equal(t, 0, code, stderr)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	elems := parseSVG(t, data)
	assert.Contains(t, texts(elems), "a mark stands for one or more requests")
	n := count(elems, "allowed")["hot"] + count(elems, "refused")["hot"]
	assert.Greater(t, n, 500)
	assert.LessOrEqual(t, n, 2*maxBins)
	assert.Less(t, len(data), 1<<20, "a picture of a megabyte or less")
}

func TestSeriesBounded(t *testing.T) {
	var s series
	var allowed, refused int64
	for i := range int64(1_000_000) {
		ok := i%3 != 0
		s.add(i*1000, i*1000+5, i*1000+7, ok)
		if ok {
			allowed++
		} else {
			refused++
		}
		if i%1000 == 0 {
			require.LessOrEqual(t, len(s.bins), maxBins)
		}
	}
	require.LessOrEqual(t, len(s.bins), maxBins)
	var a, r int64
	for i, b := range s.bins {
		a += b.allowed
		r += b.refused
		if i > 0 {
			assert.Less(t, s.bins[i-1].t1, b.t0, "bins are in order and disjoint")
		}
		assert.Equal(t, int64(5), b.b0)
		assert.Equal(t, int64(5), b.lo)
		assert.Equal(t, int64(7), b.hi)
	}
	assert.Equal(t, []int64{allowed, refused}, []int64{a, r}, "every request is counted once")

	// Requests all at one instant merge into one bin.
	var one series
	for range 3 * maxBins {
		one.add(42, 0, 0, true)
	}
	require.Len(t, one.bins, 1)
	assert.Equal(t, int64(3*maxBins), one.bins[0].allowed)
}

func TestNiceStep(t *testing.T) {
	for raw, want := range map[float64]float64{0.7: 1, 1: 1, 1.2: 2, 3: 5, 7: 10, 0.013: 0.02, 1750: 2000, 0: 1} {
		assert.InDelta(t, want, niceStep(raw), 1e-12, "niceStep(%v)", raw)
	}
	assert.Equal(t, "0.25", formatTick(0.25, 0.05))
	assert.Equal(t, "10", formatTick(10, 5))
	assert.Equal(t, "0.3", formatTick(0.30000000000000004, 0.1))
}
