package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"
)

// keyFields are the values of -key-field: the parts of an access-log line
// that can key a bucket. referer and user-agent need the Combined format.
var keyFields = []string{"host", "ident", "user", "request", "path", "status", "referer", "user-agent"}

// logLine is one parsed access-log line. Its slices point into the line.
type logLine struct {
	host, ident, user, stamp, request, status, bytes, referer, userAgent []byte
}

// parseLogLine parses a line of the Common Log Format,
//
//	host ident authuser [10/Oct/2000:13:55:36 -0700] "GET /x HTTP/1.0" 200 2326
//
// and, when combined is set, of the Combined Log Format, which adds
// "referer" "user-agent". Fields are separated by one or more spaces; a
// quoted field ends at the first '"' not escaped by a backslash, and
// nothing is unescaped. Whatever follows the last field is ignored, so a
// Combined log can be read as Common and logs with extra trailing fields
// (as nginx formats often add) are accepted.
func parseLogLine(line []byte, combined bool, l *logLine) error {
	rest := line
	var err error
	if l.host, rest, err = token(rest, "host"); err != nil {
		return err
	}
	if l.ident, rest, err = token(rest, "ident"); err != nil {
		return err
	}
	// The user name ends at the " [" that opens the timestamp.
	rest = skipSpaces(rest)
	i := bytes.Index(rest, []byte(" ["))
	if i <= 0 {
		return errors.New("no user followed by a [timestamp]")
	}
	l.user, rest = bytes.TrimRight(rest[:i], " "), skipSpaces(rest[i:])
	end := bytes.IndexByte(rest, ']')
	if end < 0 {
		return errors.New("unterminated [timestamp]")
	}
	l.stamp, rest = rest[1:end], rest[end+1:]
	if l.request, rest, err = quoted(rest, "request"); err != nil {
		return err
	}
	if l.status, rest, err = token(rest, "status"); err != nil {
		return err
	}
	if !allDigits(l.status) {
		return fmt.Errorf("status %s: not a number", quote(l.status))
	}
	if l.bytes, rest, err = token(rest, "size"); err != nil {
		return err
	}
	if string(l.bytes) != "-" && !allDigits(l.bytes) {
		return fmt.Errorf("size %s: not a number or -", quote(l.bytes))
	}
	l.referer, l.userAgent = nil, nil
	if !combined {
		return nil
	}
	if l.referer, rest, err = quoted(rest, "referer"); err != nil {
		return err
	}
	if l.userAgent, _, err = quoted(rest, "user-agent"); err != nil {
		return err
	}
	return nil
}

func skipSpaces(b []byte) []byte {
	for len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	return b
}

// token returns the next space-separated field of b.
func token(b []byte, name string) (tok, rest []byte, err error) {
	b = skipSpaces(b)
	i := bytes.IndexByte(b, ' ')
	if i < 0 {
		i = len(b)
	}
	if i == 0 {
		return nil, nil, errors.New("missing " + name)
	}
	return b[:i], b[i:], nil
}

// quoted returns the contents of the next double-quoted field of b.
func quoted(b []byte, name string) (q, rest []byte, err error) {
	b = skipSpaces(b)
	if len(b) == 0 || b[0] != '"' {
		return nil, nil, errors.New("missing quoted " + name)
	}
	for i := 1; ; i++ {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return nil, nil, errors.New("unterminated quoted " + name)
		}
		i += j
		// The quote ends the field unless an odd number of backslashes
		// escapes it.
		k := i
		for k > 1 && b[k-1] == '\\' {
			k--
		}
		if (i-k)%2 == 0 {
			return b[1:i], b[i+1:], nil
		}
	}
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if !isDigit(c) {
			return false
		}
	}
	return len(b) > 0
}

var months = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

// parseStamp parses an access log's timestamp, "10/Oct/2000:13:55:36 -0700",
// into Unix seconds.
func parseStamp(s []byte) (int64, error) {
	// 0         1         2
	// 01234567890123456789012345
	// 10/Oct/2000:13:55:36 -0700
	if len(s) != 26 || s[2] != '/' || s[6] != '/' || s[11] != ':' || s[14] != ':' || s[17] != ':' || s[20] != ' ' ||
		s[21] != '+' && s[21] != '-' {
		return 0, badStamp(s)
	}
	num := func(b []byte) int {
		n := 0
		for _, c := range b {
			if !isDigit(c) {
				return -1
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	day, year := num(s[0:2]), num(s[7:11])
	hour, minute, sec := num(s[12:14]), num(s[15:17]), num(s[18:20])
	zh, zm := num(s[22:24]), num(s[24:26])
	month := 0
	for i, m := range months {
		if string(s[3:6]) == m {
			month = i + 1
		}
	}
	// A leap second, :60, is read as the next minute's :00.
	if year < 0 || month == 0 || day < 1 || day > daysIn(year, month) || hour < 0 || hour > 23 || minute < 0 || minute > 59 ||
		sec < 0 || sec > 60 || zh < 0 || zh > 23 || zm < 0 || zm > 59 {
		return 0, badStamp(s)
	}
	off := int64(zh*3600 + zm*60)
	if s[21] == '-' {
		off = -off
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, 0, time.UTC).Unix() - off, nil
}

func badStamp(s []byte) error {
	return fmt.Errorf("timestamp %s: want a date and time like 10/Oct/2000:13:55:36 -0700", quote(s))
}

// daysIn returns the number of days in a month of a year.
func daysIn(year, month int) int {
	return time.Date(year, time.Month(month)+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// logSource reads an access log as a trace: each line is a request of cost
// 1 at its timestamp, relative to the first line's, keyed by one field.
// Servers write a line when a request completes, so lines can be slightly
// out of order: a line earlier than the latest time seen is replayed at
// that time, and counted in late and lateBy.
type logSource struct {
	lines    *lineReader
	combined bool
	keyField string
	line     logLine
	started  bool
	base     int64 // Unix seconds of the first line
	prev     int64 // time of the last request returned, ns
	late     int64 // lines replayed later than their timestamp
	lateBy   int64 // the most any line was late, ns
	stamp    []byte
	stampSec int64 // Unix seconds of stamp, the last timestamp parsed
}

func newLogSource(r io.Reader, format, keyField string) *logSource {
	return &logSource{lines: newLineReader(r), combined: format == "combined", keyField: keyField}
}

func (s *logSource) next(req *request) error {
	for {
		line, err := s.lines.next()
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := s.parse(line, req); err != nil {
			return &lineError{s.lines.n, err}
		}
		return nil
	}
}

func (s *logSource) parse(line []byte, req *request) error {
	l := &s.line
	if err := parseLogLine(line, s.combined, l); err != nil {
		return err
	}
	sec := s.stampSec
	if s.stamp == nil || !bytes.Equal(l.stamp, s.stamp) {
		var err error
		if sec, err = parseStamp(l.stamp); err != nil {
			return err
		}
		s.stamp, s.stampSec = append(s.stamp[:0], l.stamp...), sec
	}
	if !s.started {
		s.started, s.base = true, sec
	}
	rel := sec - s.base
	if rel > maxSeconds {
		return fmt.Errorf("timestamp %s: more than %d seconds after the first line's", quote(l.stamp), maxSeconds)
	}
	t := max(rel, -maxSeconds) * 1e9
	if t < s.prev {
		s.late++
		s.lateBy = max(s.lateBy, s.prev-t)
		t = s.prev
	}
	s.prev = t
	req.t, req.cost, req.key = t, 1, s.key()
	return nil
}

// key returns the line's field chosen by -key-field; an empty field is
// keyed as "-".
func (s *logSource) key() []byte {
	l := &s.line
	var k []byte
	switch s.keyField {
	case "ident":
		k = l.ident
	case "user":
		k = l.user
	case "request":
		k = l.request
	case "path":
		k = requestPath(l.request)
	case "status":
		k = l.status
	case "referer":
		k = l.referer
	case "user-agent":
		k = l.userAgent
	default:
		k = l.host
	}
	if len(k) == 0 {
		return dash
	}
	return k
}

var dash = []byte("-")

// requestPath returns the path of a request line such as
// "GET /geocode?q=paris HTTP/1.1": its second word without the query
// ("/geocode"), or nil when it has none.
func requestPath(r []byte) []byte {
	_, rest := field(r)
	target, _ := field(rest)
	if i := bytes.IndexByte(target, '?'); i >= 0 {
		target = target[:i]
	}
	return target
}
