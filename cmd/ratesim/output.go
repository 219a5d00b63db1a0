package main

import (
	"bufio"
	"io"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/jsontext"
)

// formats are the values of -format.
var formats = []string{"table", "csv", "json"}

// output writes one decision a line in a format: table (aligned columns for
// people), csv (a header row, then one row per request) or json (one object
// per line). The numbers of seconds are exact decimals. It buffers; call
// flush at the end.
type output struct {
	w      *bufio.Writer
	format string
	buf    []byte
	num    []byte
}

func newOutput(w io.Writer, format string) *output {
	return &output{w: bufio.NewWriterSize(w, 64<<10), format: format, num: make([]byte, 0, 32)}
}

// columns are the CSV and JSON fields, in order. The first seven are the
// contract's.
var columns = []string{"time", "key", "cost", "allowed", "remaining", "retry_after", "delay", "reset_after"}

// Table columns: right-aligned widths of time, result, cost, remaining,
// retry_after and delay; the key comes last, so that no key, however long,
// can break the alignment of the others.
const (
	wTime, wResult, wCost, wRemaining, wRetry, wDelay = 12, 7, 5, 9, 11, 9
)

// start writes the header, if the format has one.
func (o *output) start() error {
	switch o.format {
	case "csv":
		for i, c := range columns {
			if i > 0 {
				o.buf = append(o.buf, ',')
			}
			o.buf = append(o.buf, c...)
		}
		o.buf = append(o.buf, '\n')
	case "table":
		b := o.buf
		b = padLeft(b, "time", wTime)
		b = append(b, "  "...)
		b = padRight(b, "result", wResult)
		b = append(b, "  "...)
		b = padLeft(b, "cost", wCost)
		b = append(b, "  "...)
		b = padLeft(b, "remaining", wRemaining)
		b = append(b, "  "...)
		b = padLeft(b, "retry_after", wRetry)
		b = append(b, "  "...)
		b = padLeft(b, "delay", wDelay)
		b = append(b, "  key\n"...)
		o.buf = b
	}
	_, err := o.w.Write(o.buf)
	o.buf = o.buf[:0]
	return err
}

// write writes the decision on one request.
func (o *output) write(t int64, key string, cost int64, res ratelimit.Result) error {
	b := o.buf[:0]
	switch o.format {
	case "csv":
		b = appendSeconds(b, t)
		b = append(b, ',')
		b = appendCSVField(b, key)
		b = append(b, ',')
		b = strconv.AppendInt(b, cost, 10)
		b = append(b, ',')
		b = strconv.AppendBool(b, res.Allowed)
		b = append(b, ',')
		b = strconv.AppendInt(b, res.Remaining, 10)
		b = append(b, ',')
		b = appendSeconds(b, int64(res.RetryAfter))
		b = append(b, ',')
		b = appendSeconds(b, int64(res.Delay))
		b = append(b, ',')
		b = appendSeconds(b, int64(res.ResetAfter))
		b = append(b, '\n')
	case "json":
		b = append(b, `{"time":`...)
		b = appendSeconds(b, t)
		b = append(b, `,"key":`...)
		b = jsontext.AppendString(b, key, false)
		b = append(b, `,"cost":`...)
		b = strconv.AppendInt(b, cost, 10)
		b = append(b, `,"allowed":`...)
		b = strconv.AppendBool(b, res.Allowed)
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, res.Remaining, 10)
		b = append(b, `,"retry_after":`...)
		b = appendSeconds(b, int64(res.RetryAfter))
		b = append(b, `,"delay":`...)
		b = appendSeconds(b, int64(res.Delay))
		b = append(b, `,"reset_after":`...)
		b = appendSeconds(b, int64(res.ResetAfter))
		b = append(b, "}\n"...)
	default: // table
		b = padLeftBytes(b, appendSeconds(o.scratch(), t), wTime)
		b = append(b, "  "...)
		if res.Allowed {
			b = padRight(b, "allowed", wResult)
		} else {
			b = padRight(b, "DENIED", wResult)
		}
		b = append(b, "  "...)
		b = padLeftBytes(b, strconv.AppendInt(o.scratch(), cost, 10), wCost)
		b = append(b, "  "...)
		b = padLeftBytes(b, strconv.AppendInt(o.scratch(), res.Remaining, 10), wRemaining)
		b = append(b, "  "...)
		switch {
		case res.Allowed:
			b = padLeft(b, "-", wRetry)
		case cost > res.Policy.Limit.Burst():
			b = padLeft(b, "never", wRetry)
		default:
			b = padLeftBytes(b, appendSeconds(o.scratch(), int64(res.RetryAfter)), wRetry)
		}
		b = append(b, "  "...)
		if res.Delay > 0 {
			b = padLeftBytes(b, appendSeconds(o.scratch(), int64(res.Delay)), wDelay)
		} else {
			b = padLeft(b, "-", wDelay)
		}
		b = append(b, "  "...)
		b = append(b, printable(key)...)
		b = append(b, '\n')
	}
	o.buf = b
	_, err := o.w.Write(b)
	return err
}

// scratch returns an empty buffer for one number of a table row, which
// fits in its capacity.
func (o *output) scratch() []byte { return o.num[:0] }

func (o *output) flush() error { return o.w.Flush() }

func padLeft(b []byte, s string, width int) []byte {
	for n := utf8.RuneCountInString(s); n < width; n++ {
		b = append(b, ' ')
	}
	return append(b, s...)
}

func padLeftBytes(b, s []byte, width int) []byte {
	for n := len(s); n < width; n++ {
		b = append(b, ' ')
	}
	return append(b, s...)
}

func padRight(b []byte, s string, width int) []byte {
	b = append(b, s...)
	for n := utf8.RuneCountInString(s); n < width; n++ {
		b = append(b, ' ')
	}
	return b
}

// appendCSVField appends s as one CSV field, quoted when encoding/csv's
// Writer would quote it: when it contains a comma, a quote, a carriage
// return or a newline, begins with a space, or is `\.`.
func appendCSVField(b []byte, s string) []byte {
	needs := s == `\.`
	for i := 0; i < len(s) && !needs; i++ {
		switch s[i] {
		case ',', '"', '\r', '\n':
			needs = true
		}
	}
	if !needs && s != "" {
		r, _ := utf8.DecodeRuneInString(s)
		needs = unicode.IsSpace(r)
	}
	if !needs {
		return append(b, s...)
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			b = append(b, '"')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}
