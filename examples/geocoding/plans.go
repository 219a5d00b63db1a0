package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tokenfair/ratelimit"
)

// plan is the limits of one API key, read from the -plans file, with the
// flags' values where the file says nothing.
type plan struct {
	rate           ratelimit.Limit
	daily, monthly ratelimit.Limit // the zero Limit: no such quota
}

// quotas returns the calendar quotas that p gives its key.
func (p *plan) quotas() quotas {
	var q quotas
	if p.daily != (ratelimit.Limit{}) {
		q |= dailyQuota
	}
	if p.monthly != (ratelimit.Limit{}) {
		q |= monthlyQuota
	}
	return q
}

// planTable holds the plans last read, by the limiter's key of their API
// key, swapped whole when the file is read again. It is safe for
// concurrent use; a lookup takes no lock.
type planTable struct {
	plans atomic.Pointer[map[string]*plan]
}

// get returns the plan of the limiter's key key, or nil; a nil t has none.
func (t *planTable) get(key string) *plan {
	if t == nil {
		return nil
	}
	if m := t.plans.Load(); m != nil {
		return (*m)[key]
	}
	return nil
}

// limitFor returns a Policy.LimitFor that gives a key the limit of its
// plan that of returns, if it has a plan and the plan has that limit.
func (t *planTable) limitFor(of func(*plan) ratelimit.Limit) func(key string) (ratelimit.Limit, bool) {
	return func(key string) (ratelimit.Limit, bool) {
		if p := t.get(key); p != nil {
			l := of(p)
			return l, l != (ratelimit.Limit{})
		}
		return ratelimit.Limit{}, false
	}
}

// planDefaults are what the fields a plan leaves out take: the flags'
// -rate, -burst, -daily and -monthly, in the time zone of -tz.
type planDefaults struct {
	rate           float64
	burst          int64
	daily, monthly int64
	loc            *time.Location
}

// maxPlansSize bounds the -plans file: some 200 000 plans.
const maxPlansSize = 16 << 20

// planReader reads and checks the -plans file.
type planReader struct {
	path string
	def  planDefaults
	// check reports why the rate policy cannot apply a plan's rate.
	check func(ratelimit.Limit) error
}

// read reads the file and returns its plans by the limiter's key, and the
// file's information as it was when opened, to tell a later change. Its
// errors start with the file's name and, for an invalid content, the line.
func (pr *planReader) read() (map[string]*plan, os.FileInfo, error) {
	f, err := os.Open(pr.path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxPlansSize+1))
	if err != nil {
		return nil, fi, fmt.Errorf("%s: %w", pr.path, err)
	}
	if len(data) > maxPlansSize {
		return nil, fi, fmt.Errorf("%s: larger than %d MiB", pr.path, maxPlansSize>>20)
	}
	plans, err := pr.parse(data)
	if err != nil {
		return nil, fi, fmt.Errorf("%s:%w", pr.path, err)
	}
	return plans, fi, nil
}

// planKey returns the limiter's key of apiKey: the key that the server's
// key function, KeyByAPIKey(X-API-Key), finds in a request carrying it
// (-plans needs -key api-key). An API key that is empty, or only white
// space, is none: such a request is answered 401.
func planKey(apiKey string) (string, error) {
	if strings.TrimSpace(apiKey) == "" {
		return "", fmt.Errorf("an %s field holding it is empty", apiKeyHeader)
	}
	return ratelimit.KeyOfAPIKey(apiKeyHeader, apiKey), nil
}

// planFields are the fields of a plan, as the file writes them.
var planFields = map[string]bool{"rate": true, "burst": true, "daily": true, "monthly": true}

// parse returns the plans of data, a JSON object of plans by API key. Its
// errors start with the line at fault: "3: ...".
func (pr *planReader) parse(data []byte) (map[string]*plan, error) {
	if err := syntaxError(data); err != nil {
		return nil, err
	}
	p := &planParser{data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	p.dec.UseNumber()
	if tok, err := p.token(); err != nil {
		return nil, err
	} else if tok != json.Delim('{') {
		return nil, p.errorf("want a JSON object of plans by API key, {\"KEY\": {\"rate\": R, ...}, ...}")
	}
	plans := map[string]*plan{}
	lines := map[string]int{}      // the line of each API key
	apiKeys := map[string]string{} // the API key of each limiter's key
	for p.dec.More() {
		tok, err := p.token()
		if err != nil {
			return nil, err
		}
		apiKey := tok.(string) // an object's key
		if at, ok := lines[apiKey]; ok {
			return nil, p.errorf("key %q: already given at line %d", apiKey, at)
		}
		lines[apiKey] = p.line()
		key, err := planKey(apiKey)
		if err != nil {
			return nil, p.errorf("key %q: not an API key: %v", apiKey, err)
		}
		if other, ok := apiKeys[key]; ok {
			return nil, p.errorf("key %q: the same API key as %q, at line %d", apiKey, other, lines[other])
		}
		apiKeys[key] = apiKey
		if plans[key], err = pr.plan(p, apiKey); err != nil {
			return nil, err
		}
	}
	if _, err := p.token(); err != nil { // the closing brace
		return nil, err
	}
	// After the object, only JSON's white space.
	if rest := bytes.TrimLeft(data[p.dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return nil, fmt.Errorf("%d: unexpected data after the object of plans", lineAt(data, int64(len(data)-len(rest))))
	}
	return plans, nil
}

// syntaxError returns nil if data begins with a well-formed JSON value,
// else the error of the first fault, naming its line: "3: invalid
// character ...", or "2: unexpected end of the file" for a file that
// ends inside the value, or holds none, on the line of its last byte.
//
// It reads the value whole, from the start of data, so that the
// SyntaxError's Offset counts the bytes from the start of data. (Read
// token by token, a SyntaxError counts only some of those before it.)
func syntaxError(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	err := dec.Decode(new(json.RawMessage))
	var syntax *json.SyntaxError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &syntax):
		return fmt.Errorf("%d: %v", lineAt(data, badByte(data, syntax.Offset)), err)
	case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		return endOfFile(data)
	}
	return fmt.Errorf("%d: %v", lineAt(data, dec.InputOffset()), err)
}

// badByte returns the offset of the byte at which data stops being the
// start of a well-formed JSON value, given offset, the Offset of the
// SyntaxError of reading data. encoding/json counts that byte in Offset;
// built with GOEXPERIMENT=jsonv2, it counts only the bytes before it. The
// two name different lines when the byte is a newline (in a string, say,
// where it ends the line at fault) or the first of a line, so they are
// told apart by reading data up to offset again.
func badByte(data []byte, offset int64) int64 {
	offset = min(max(offset, 0), int64(len(data)))
	var syntax *json.SyntaxError
	if errors.As(json.NewDecoder(bytes.NewReader(data[:offset])).Decode(new(json.RawMessage)), &syntax) {
		return offset - 1 // data[:offset] holds the bad byte: its last
	}
	return offset
}

// endOfFile is the error of a file that ends too soon, on the line of its
// last byte: a final newline ends the last line, it does not start another.
func endOfFile(data []byte) error {
	return fmt.Errorf("%d: unexpected end of the file", lineAt(data, int64(len(data))-1))
}

// lineAt returns the line, from 1, of the byte of data at offset off: one
// more than the newlines before it. An offset out of data is taken as its
// nearest end.
func lineAt(data []byte, off int64) int {
	off = min(max(off, 0), int64(len(data)))
	return 1 + bytes.Count(data[:off], []byte("\n"))
}

// planParser reads the tokens of a -plans file, once syntaxError has found
// it well formed, and knows the line of each.
type planParser struct {
	data []byte
	dec  *json.Decoder
}

// line returns the line of the token just read. The decoder's InputOffset
// is just past it, and no token holds a newline: its last byte is on its
// line.
func (p *planParser) line() int { return lineAt(p.data, p.dec.InputOffset()-1) }

// errorf returns the error of the token just read: "LINE: ...".
func (p *planParser) errorf(format string, args ...any) error {
	return fmt.Errorf("%d: %s", p.line(), fmt.Sprintf(format, args...))
}

// token returns the next token. syntaxError has found the file well
// formed, so that no error is expected here; one would be named at the
// decoder's position.
func (p *planParser) token() (json.Token, error) {
	tok, err := p.dec.Token()
	if err == io.EOF {
		return nil, endOfFile(p.data)
	} else if err != nil {
		return nil, fmt.Errorf("%d: %v", lineAt(p.data, p.dec.InputOffset()), err)
	}
	return tok, nil
}

// plan reads the plan of apiKey, an object of fields, through p and checks
// it. An unknown field, or a value at fault, is named at its own line; a
// rate and burst that do not go together (one may be a flag's), at the
// line of the key.
func (pr *planReader) plan(p *planParser, apiKey string) (*plan, error) {
	keyLine := p.line()
	if tok, err := p.token(); err != nil {
		return nil, err
	} else if tok != json.Delim('{') {
		return nil, p.errorf("key %q: want an object of rate, burst, daily and monthly", apiKey)
	}
	d := pr.def
	for {
		tok, err := p.token()
		if err != nil {
			return nil, err
		}
		if tok == json.Delim('}') {
			break
		}
		field := tok.(string)
		if !planFields[field] {
			return nil, p.errorf("key %q: unknown field %q: want rate, burst, daily or monthly", apiKey, field)
		}
		if tok, err = p.token(); err != nil {
			return nil, err
		}
		n, ok := tok.(json.Number)
		if !ok {
			return nil, p.errorf("key %q: %s %s: want a number", apiKey, field, valueText(tok))
		}
		if err := setPlanField(&d, field, n); err != nil {
			return nil, p.errorf("key %q: %s %s: %v", apiKey, field, n, err)
		}
	}
	rate, err := limitOf(d.rate, d.burst)
	if err == nil {
		err = pr.check(rate)
	}
	if err != nil {
		return nil, fmt.Errorf("%d: key %q: rate %s burst %d: %v", keyLine, apiKey, formatFloat(d.rate), d.burst, err)
	}
	pl := &plan{rate: rate}
	if d.daily > 0 {
		pl.daily = ratelimit.Daily(d.daily, d.loc)
	}
	if d.monthly > 0 {
		pl.monthly = ratelimit.Monthly(d.monthly, d.loc)
	}
	return pl, nil
}

// setPlanField sets the field of d that the plan's field names to n, or
// reports why n is not valid there.
func setPlanField(d *planDefaults, field string, n json.Number) error {
	if field == "rate" {
		r, err := n.Float64()
		if err != nil || math.IsInf(r, 0) || r <= 0 {
			return errors.New("want a positive, finite number of tokens per second")
		}
		d.rate = r
		return nil
	}
	v, err := strconv.ParseInt(n.String(), 10, 64)
	switch {
	case field == "burst" && (err != nil || v < 1):
		return errors.New("want a capacity of at least 1, a whole number")
	case field != "burst" && (err != nil || v < 0 || v > maxQuota):
		return fmt.Errorf("want a quota of 1 to %d requests, a whole number, or 0 for none", int64(maxQuota))
	}
	switch field {
	case "burst":
		d.burst = v
	case "daily":
		d.daily = v
	case "monthly":
		d.monthly = v
	}
	return nil
}

// valueText writes a JSON token that is not a number as the file has it.
func valueText(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(v)
	case json.Delim:
		if v == '{' {
			return "{...}"
		}
		return "[...]"
	}
	return fmt.Sprint(tok)
}
