package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// request is one line of input: a time in nanoseconds from the start, a key
// and a cost. key is only valid until the source's next call.
type request struct {
	t    int64
	key  []byte
	cost int64
}

// source reads requests in order of time. next returns io.EOF at the end,
// a *lineError for a malformed line (the source can go on after one), or
// another error when reading fails.
type source interface {
	next(*request) error
}

// lineError reports a malformed line of input.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return "line " + strconv.Itoa(e.line) + ": " + e.err.Error() }

func (e *lineError) Unwrap() error { return e.err }

// maxLine is the longest line accepted, in bytes.
const maxLine = 64 << 10

var errLineTooLong = errors.New("longer than " + strconv.Itoa(maxLine) + " bytes")

// lineReader reads lines ending in "\n" or "\r\n" (or the end of input) and
// counts them. It reads through a fixed buffer, so a line costs no
// allocation.
type lineReader struct {
	r *bufio.Reader
	n int // number of the last line returned
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, maxLine+2)}
}

// next returns the next line without its end, valid until the following
// call; lr.n is then its number. A line longer than maxLine is skipped with
// a *lineError wrapping errLineTooLong.
func (lr *lineReader) next() ([]byte, error) {
	line, err := lr.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = lr.r.ReadSlice('\n')
		}
		lr.n++
		if err != nil && err != io.EOF {
			return nil, err
		}
		return nil, &lineError{lr.n, errLineTooLong}
	}
	if err != nil && (err != io.EOF || len(line) == 0) {
		return nil, err
	}
	lr.n++
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if len(line) > maxLine {
		return nil, &lineError{lr.n, errLineTooLong}
	}
	return line, nil
}

// traceSource reads a trace: one request a line, "TIME [KEY [COST]]",
// fields separated by spaces or tabs; blank lines and lines whose first
// non-blank character is '#' are skipped; times must not decrease.
type traceSource struct {
	lines *lineReader
	prev  int64 // time of the last request returned
}

func newTraceSource(r io.Reader) *traceSource { return &traceSource{lines: newLineReader(r)} }

func (s *traceSource) next(req *request) error {
	for {
		line, err := s.lines.next()
		if err != nil {
			return err
		}
		ok, err := parseTraceLine(line, req)
		if err != nil {
			return &lineError{s.lines.n, err}
		}
		if !ok {
			continue
		}
		if req.t < s.prev {
			return &lineError{s.lines.n, fmt.Errorf("time %s is before the previous line's %s: times must not decrease",
				formatSeconds(req.t), formatSeconds(s.prev))}
		}
		s.prev = req.t
		return nil
	}
}

// defaultKey is the key of a trace line that names none.
var defaultKey = []byte("default")

// parseTraceLine parses one line of a trace into req. It reports false for
// a blank line or a comment.
func parseTraceLine(line []byte, req *request) (bool, error) {
	timeField, rest := field(line)
	if len(timeField) == 0 || timeField[0] == '#' {
		return false, nil
	}
	t, err := parseSeconds(timeField)
	if err != nil {
		return false, fmt.Errorf("time %s: %v", quote(timeField), err)
	}
	req.t, req.key, req.cost = t, defaultKey, 1
	key, rest := field(rest)
	if len(key) == 0 {
		return true, nil
	}
	req.key = key
	costField, rest := field(rest)
	if len(costField) == 0 {
		return true, nil
	}
	if req.cost, err = parseCount(costField); err != nil {
		return false, fmt.Errorf("cost %s: %v", quote(costField), err)
	}
	if extra, _ := field(rest); len(extra) > 0 {
		return false, fmt.Errorf("unexpected %s after the cost: want TIME [KEY [COST]]", quote(extra))
	}
	return true, nil
}

// field returns the first field of b, separated by blanks (spaces and
// tabs), and what follows.
func field(b []byte) (f, rest []byte) {
	i := 0
	for i < len(b) && isBlank(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !isBlank(b[j]) {
		j++
	}
	return b[i:j], b[j:]
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// quote returns b quoted for an error message, cut to a readable length.
func quote(b []byte) string {
	const most = 40
	if len(b) > most {
		return strconv.Quote(string(b[:most])) + "…"
	}
	return strconv.Quote(string(b))
}
