package main

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/tokenfair/ratelimit"
)

// A series records one key's bucket over time for the picture, in bounded
// memory: one bin per request up to maxBins requests, then bins of a width
// (a power of two nanoseconds) that doubles whenever they grow past
// maxBins. A bin keeps the level before its first request and after its
// last, the least and most level in between, and the count and last level
// of its allowed and refused requests, so the picture stays exact where
// there is room for every request and faithful where there is not.
type series struct {
	bins  []bin
	width int64 // 0: a bin per request
}

// maxBins bounds the bins of a series.
const maxBins = 2000

// bin summarizes the requests of one key in a span of time. Levels are
// backlogs: how far, in nanoseconds, the key's state is ahead of the time.
type bin struct {
	t0, t1           int64 // times of the first and last requests
	b0               int64 // backlog just before the first request
	s1               int64 // state after the last request
	lo, hi           int64 // least and most backlog in the bin
	allowed, refused int64
	aB, rB           int64 // backlog after the last allowed and the last refused request
}

// backlog is how far state is ahead of t: for the token bucket and the
// policing leaky bucket, Interval × the tokens missing from a full bucket
// (the water in the leaky bucket); for the shaping queue, the work queued.
func backlog(state, t int64) int64 { return max(state-t, 0) }

func (s *series) add(t, before, after int64, allowed bool) {
	b0, b1 := backlog(before, t), backlog(after, t)
	nb := bin{t0: t, t1: t, b0: b0, s1: after, lo: min(b0, b1), hi: max(b0, b1)}
	if allowed {
		nb.allowed, nb.aB = 1, b1
	} else {
		nb.refused, nb.rB = 1, b1
	}
	if n := len(s.bins); s.width > 0 && n > 0 && t/s.width == s.bins[n-1].t0/s.width {
		s.bins[n-1] = merge(s.bins[n-1], nb)
	} else {
		s.bins = append(s.bins, nb)
	}
	for len(s.bins) > maxBins {
		s.coarsen()
	}
}

// coarsen merges bins: the first time into bins wide enough that the span
// so far needs at most maxBins/2 of them, later into bins twice as wide.
func (s *series) coarsen() {
	if s.width == 0 {
		span := s.bins[len(s.bins)-1].t1 - s.bins[0].t0
		s.width = 1
		for s.width < span/(maxBins/2) {
			s.width *= 2
		}
	} else {
		s.width *= 2
	}
	out := s.bins[:1]
	for _, b := range s.bins[1:] {
		if last := &out[len(out)-1]; b.t0/s.width == last.t0/s.width {
			*last = merge(*last, b)
		} else {
			out = append(out, b)
		}
	}
	s.bins = out
}

// merge returns the bin of the requests of a followed by those of b.
func merge(a, b bin) bin {
	m := bin{
		t0: a.t0, t1: b.t1, b0: a.b0, s1: b.s1,
		lo: min(a.lo, b.lo), hi: max(a.hi, b.hi),
		allowed: a.allowed + b.allowed, refused: a.refused + b.refused,
		aB: a.aB, rB: a.rB,
	}
	if b.allowed > 0 {
		m.aB = b.aB
	}
	if b.refused > 0 {
		m.rB = b.rB
	}
	return m
}

// plotSpec is what the picture shows.
type plotSpec struct {
	policy  ratelimit.Policy
	empty   bool  // -start empty
	initial int64 // state of a key when first seen
	last    int64 // time of the last request of the whole input
	panels  []panel
}

// panel is one key's part of the picture.
type panel struct {
	key    string
	stats  keyStats
	series *series
}

// Layout of the picture, in pixels.
const (
	svgWidth     = 960
	headerHeight = 78
	panelHeight  = 250
	marginLeft   = 72
	marginRight  = 24
	panelTop     = 34 // from the panel's top to its plot area
	panelBottom  = 48 // from the plot area to the panel's bottom
	plotWidth    = svgWidth - marginLeft - marginRight
	plotHeight   = panelHeight - panelTop - panelBottom
)

const (
	colorAllowed = "#1a9641"
	colorRefused = "#d7191c"
	colorLevel   = "#2c7bb6"
	colorGrid    = "#e4e4e4"
	colorText    = "#222222"
)

// writeSVG draws spec: for each panel, the key's bucket level over time,
// with allowed requests as green dots and refused ones as red crosses, on
// a shared time axis.
func writeSVG(w io.Writer, spec plotSpec) error {
	bw := bufio.NewWriter(w)
	p := &svgWriter{w: bw, spec: spec}
	p.write()
	if p.err != nil {
		return p.err
	}
	return bw.Flush()
}

type svgWriter struct {
	w    *bufio.Writer
	spec plotSpec
	err  error

	xmax    int64   // right end of the time axis, ns
	xunit   float64 // seconds per unit of the time axis labels
	xstep   float64 // time between ticks, in xunits
	xname   string  // that unit's name
	ymax    float64 // top of the level axis, units
	binned  bool    // some mark stands for several requests
	numbuf  []byte
	yTitle  string
	capName string
}

func (p *svgWriter) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

// text writes s escaped for XML character data or an attribute value.
func (p *svgWriter) text(s string) {
	if p.err == nil {
		p.err = xml.EscapeText(p.w, []byte(s))
	}
}

// num formats a coordinate with one decimal.
func (p *svgWriter) num(f float64) string {
	p.numbuf = strconv.AppendFloat(p.numbuf[:0], f, 'f', 1, 64)
	return string(p.numbuf)
}

// value converts a backlog into the unit of the level axis: tokens in the
// bucket for the token bucket; water in the bucket or requests queued, in
// units of cost, for the leaky buckets.
func (p *svgWriter) value(backlog int64) float64 {
	l := p.spec.policy.Limit
	units := float64(backlog) / float64(l.Interval())
	if p.spec.policy.Algorithm == ratelimit.TokenBucket {
		return float64(l.Burst()) - units
	}
	return units
}

func (p *svgWriter) x(t int64) float64 {
	return marginLeft + float64(t)/float64(p.xmax)*plotWidth
}

func (p *svgWriter) y(top float64, v float64) float64 {
	return top + plotHeight - v/p.ymax*plotHeight
}

func (p *svgWriter) layout() {
	s := p.spec
	l := s.policy.Limit
	last := s.last
	if last <= 0 {
		last = l.Burst() * int64(l.Interval())
	}
	seconds := float64(last) / 1e9
	switch {
	case seconds >= 2*3600:
		p.xunit, p.xname = 3600, "h"
	case seconds >= 2*60:
		p.xunit, p.xname = 60, "min"
	default:
		p.xunit, p.xname = 1, "s"
	}
	// About ten ticks, and a little room after the last request.
	p.xstep = niceStep(seconds * 1.02 / p.xunit / 10)
	p.xmax = int64(math.Ceil(seconds*1.02/p.xunit/p.xstep) * p.xstep * p.xunit * 1e9)
	p.xmax = max(p.xmax, 1)

	p.ymax = float64(l.Burst())
	switch s.policy.Algorithm {
	case ratelimit.TokenBucket:
		p.yTitle, p.capName = "tokens in the bucket", "capacity"
	case ratelimit.LeakyPolice:
		p.yTitle, p.capName = "water in the bucket", "capacity"
	default:
		p.yTitle, p.capName = "requests queued", "queue room"
		most := backlog(s.initial, 0)
		for _, pn := range s.panels {
			for _, b := range pn.series.bins {
				most = max(most, b.hi)
			}
		}
		p.ymax = max(p.ymax, math.Ceil(float64(most)/float64(l.Interval())))
	}
	for _, pn := range s.panels {
		for _, b := range pn.series.bins {
			if b.allowed+b.refused > 1 {
				p.binned = true
			}
		}
	}
}

func (p *svgWriter) write() {
	p.layout()
	s := p.spec
	height := headerHeight + len(s.panels)*panelHeight + 8
	p.printf(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	p.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12" fill="%s">`+"\n",
		svgWidth, height, svgWidth, height, colorText)
	p.printf(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	start := "full"
	if s.empty {
		start = "empty"
	}
	p.printf(`<text class="title" x="%d" y="24" font-size="16" font-weight="bold">`, marginLeft)
	alg, _ := s.policy.Algorithm.MarshalText()
	p.text(fmt.Sprintf("ratesim: %s, %v, buckets %s at time 0", alg, s.policy.Limit, start))
	p.printf("</text>\n")
	p.legend()
	for i, pn := range s.panels {
		p.panel(float64(headerHeight+i*panelHeight), pn)
	}
	p.printf("</svg>\n")
}

func (p *svgWriter) legend() {
	y := 50.0
	x := float64(marginLeft)
	p.printf(`<g class="legend">` + "\n")
	p.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2"/>`, p.num(x), p.num(y), p.num(x+24), p.num(y), colorLevel)
	p.printf(`<text x="%s" y="%s">%s</text>`+"\n", p.num(x+30), p.num(y+4), p.yTitle)
	x += 30 + 7*float64(len(p.yTitle)) + 24
	p.printf(`<circle cx="%s" cy="%s" r="3.5" fill="%s"/>`, p.num(x+4), p.num(y), colorAllowed)
	p.printf(`<text x="%s" y="%s">allowed</text>`+"\n", p.num(x+14), p.num(y+4))
	x += 14 + 60
	p.cross(x+4, y)
	p.printf(`<text x="%s" y="%s">refused</text>`+"\n", p.num(x+14), p.num(y+4))
	x += 14 + 64
	p.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#888888" stroke-dasharray="5,3"/>`, p.num(x), p.num(y), p.num(x+24), p.num(y))
	p.printf(`<text x="%s" y="%s">%s (%d)</text>`+"\n", p.num(x+30), p.num(y+4), p.capName, p.spec.policy.Limit.Burst())
	if p.binned {
		p.printf(`<text x="%d" y="%s" fill="#666666">Too many requests for a mark each: a mark stands for one or more requests, a vertical stroke for the levels in between.</text>`+"\n",
			marginLeft, p.num(y+20))
	}
	p.printf("</g>\n")
}

func (p *svgWriter) cross(x, y float64) {
	const r = 3.5
	p.printf(`<path class="refused" d="M%s %sL%s %sM%s %sL%s %s" stroke="%s" stroke-width="1.8"/>`,
		p.num(x-r), p.num(y-r), p.num(x+r), p.num(y+r), p.num(x-r), p.num(y+r), p.num(x+r), p.num(y-r), colorRefused)
}

func (p *svgWriter) panel(top float64, pn panel) {
	plotTop := top + panelTop
	plotBottom := plotTop + plotHeight
	p.printf(`<g class="panel" data-key="`)
	p.text(pn.key)
	p.printf(`">` + "\n")
	st := pn.stats
	title := fmt.Sprintf("key %s: %d %s, %d allowed, %d refused", strconv.Quote(printable(pn.key)), st.requests, plural(st.requests, "request", "requests"), st.allowed, st.refused)
	if st.requests == 0 {
		title = fmt.Sprintf("key %s: no requests", strconv.Quote(printable(pn.key)))
	} else if st.longest > 1 {
		title += fmt.Sprintf(" (at most %d in a row)", st.longest)
	}
	p.printf(`<text class="panel-title" x="%d" y="%s" font-size="13" font-weight="bold">`, marginLeft, p.num(top+22))
	p.text(title)
	p.printf("</text>\n")

	// Grid and axes.
	yStep := niceStep(p.ymax / 5)
	for v := 0.0; v <= p.ymax+1e-9; v += yStep {
		y := p.y(plotTop, v)
		p.printf(`<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="%s"/>`, marginLeft, p.num(y), marginLeft+plotWidth, p.num(y), colorGrid)
		p.printf(`<text x="%d" y="%s" text-anchor="end">%s</text>`+"\n", marginLeft-6, p.num(y+4), formatTick(v, yStep))
	}
	xStep := p.xstep
	for v := 0.0; v*p.xunit*1e9 <= float64(p.xmax)*(1+1e-9); v += xStep {
		x := p.x(int64(v * p.xunit * 1e9))
		p.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s"/>`, p.num(x), p.num(plotTop), p.num(x), p.num(plotBottom+4), colorGrid)
		p.printf(`<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", p.num(x), p.num(plotBottom+18), formatTick(v, xStep))
	}
	p.printf(`<rect x="%d" y="%s" width="%d" height="%d" fill="none" stroke="#999999"/>`+"\n", marginLeft, p.num(plotTop), plotWidth, plotHeight)
	p.printf(`<text x="%s" y="%s" text-anchor="middle">time (%s)</text>`+"\n", p.num(marginLeft+plotWidth/2), p.num(plotBottom+36), p.xname)
	p.printf(`<text x="16" y="%s" text-anchor="middle" transform="rotate(-90 16 %s)">%s</text>`+"\n",
		p.num(plotTop+plotHeight/2), p.num(plotTop+plotHeight/2), p.yTitle)
	capY := p.y(plotTop, float64(p.spec.policy.Limit.Burst()))
	p.printf(`<line class="capacity" x1="%d" y1="%s" x2="%d" y2="%s" stroke="#888888" stroke-dasharray="5,3"/>`+"\n",
		marginLeft, p.num(capY), marginLeft+plotWidth, p.num(capY))

	// The level: exact between requests, where it refills (or drains) at
	// one unit every Interval.
	p.printf(`<polyline class="level" fill="none" stroke="%s" stroke-width="1.5" stroke-linejoin="round" points="`, colorLevel)
	var lastX, lastY float64
	first := true
	point := func(t, b int64) {
		x, y := p.x(t), p.y(plotTop, p.value(b))
		if !first && x == lastX && y == lastY {
			return
		}
		if !first {
			p.printf(" ")
		}
		p.printf("%s,%s", p.num(x), p.num(y))
		first, lastX, lastY = false, x, y
	}
	// toward draws the level from (t, state) on to u, when nothing happens.
	toward := func(t, state, u int64) {
		if state > t && state < u {
			point(state, 0)
		}
		point(u, backlog(state, u))
	}
	t, state := int64(0), p.spec.initial
	point(0, backlog(state, 0))
	var bins []bin
	if pn.series != nil {
		bins = pn.series.bins
	}
	for _, b := range bins {
		toward(t, state, b.t0)
		point(b.t0, b.b0)
		if b.allowed+b.refused > 1 {
			mid := b.t0 + (b.t1-b.t0)/2
			point(mid, b.hi)
			point(mid, b.lo)
		}
		point(b.t1, backlog(b.s1, b.t1))
		t, state = b.t1, b.s1
	}
	toward(t, state, p.xmax)
	p.printf(`"/>` + "\n")

	// The requests.
	for _, b := range bins {
		x := b.t1
		if b.allowed+b.refused > 1 {
			x = b.t0 + (b.t1-b.t0)/2
		}
		if b.allowed > 0 {
			p.printf(`<circle class="allowed" cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", p.num(p.x(x)), p.num(p.y(plotTop, p.value(b.aB))), colorAllowed)
		}
		if b.refused > 0 {
			p.cross(p.x(x), p.y(plotTop, p.value(b.rB)))
			p.printf("\n")
		}
	}
	p.printf("</g>\n")
}

// niceStep returns the step of 1, 2 or 5 times a power of ten nearest
// above raw.
func niceStep(raw float64) float64 {
	if !(raw > 0) || math.IsInf(raw, 0) {
		return 1
	}
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*pow {
			return m * pow
		}
	}
	return 10 * pow
}

// formatTick formats a tick value with the decimals its step needs.
func formatTick(v, step float64) string {
	decimals := max(0, int(-math.Floor(math.Log10(step)+1e-9)))
	return strconv.FormatFloat(v, 'f', decimals, 64)
}
