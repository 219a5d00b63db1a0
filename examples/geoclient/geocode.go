package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tokenfair/ratelimit/pace"
)

// source yields the names to geocode, in order, and returns the error that
// ended it early, if any.
type source func(yield func(string) bool) error

// fromArgs is the source of the names given as arguments.
func fromArgs(names []string) source {
	return func(yield func(string) bool) error {
		for _, name := range names {
			if !yield(name) {
				break
			}
		}
		return nil
	}
}

// maxLine bounds a line of standard input.
const maxLine = 64 << 10

// fromLines is the source of the lines of r, trimmed, blank ones skipped.
func fromLines(r io.Reader) source {
	return func(yield func(string) bool) error {
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, maxLine)
		for sc.Scan() {
			if name := strings.TrimSpace(sc.Text()); name != "" && !yield(name) {
				return nil
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("reading standard input: %w", err)
		}
		return nil
	}
}

// geocoder sends GET /geocode?q=NAME through a pace.Transport over a
// counting transport.
type geocoder struct {
	endpoint string // the server's /geocode
	key      string
	maxWait  time.Duration // -max-wait, for messages
	client   *http.Client
	waits    *waits
}

func newGeocoder(cfg config) *geocoder {
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = cfg.concurrency // keep every worker's connection
	w := new(waits)
	return &geocoder{
		endpoint: strings.TrimSuffix(cfg.url, "/") + "/geocode",
		key:      cfg.key,
		maxWait:  cfg.maxWait,
		client:   &http.Client{Transport: pace.New(&counting{base: base, waits: w}, cfg.options())},
		waits:    w,
	}
}

// close closes the idle connections.
func (g *geocoder) close() { g.client.CloseIdleConnections() }

// summary counts the names by their outcome.
type summary struct {
	names, ok, notFound, refused, retries int
}

// job is a name to geocode, and the channel of its outcome.
type job struct {
	name string
	done chan outcome // buffered: a worker never waits for the printer
}

// all geocodes the names of src with n workers and writes their lines to
// out in input order, each as soon as it and those before it are done. It
// returns what happened to them, and the error of src or out.
func (g *geocoder) all(ctx context.Context, src source, out io.Writer, n int) (summary, error) {
	jobs := make(chan job)
	inOrder := make(chan job, 4*n) // how far reading may run ahead of printing
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for j := range jobs {
				j.done <- g.geocode(ctx, j.name)
			}
		})
	}
	var readErr error
	go func() {
		defer close(inOrder)
		defer close(jobs)
		readErr = src(func(name string) bool {
			j := job{name, make(chan outcome, 1)}
			inOrder <- j
			jobs <- j
			return true
		})
	}()
	var sum summary
	var writeErr error
	for j := range inOrder {
		o := <-j.done
		if _, err := out.Write(o.line); err != nil && writeErr == nil {
			writeErr = fmt.Errorf("writing the output: %w", err)
		}
		sum.names++
		switch {
		case o.err:
		case o.status == http.StatusOK:
			sum.ok++
		case o.status == http.StatusNotFound:
			sum.notFound++
		}
		sum.refused += o.refused
		sum.retries += max(o.attempts-1, 0)
	}
	wg.Wait()
	return sum, errors.Join(readErr, writeErr)
}

// outcome is what became of one name: its line of output, whether it
// failed without a usable answer, and its tally.
type outcome struct {
	line []byte
	err  bool
	tally
}

// maxBody bounds what is read of an answer.
const maxBody = 1 << 20

// geocode looks name up and returns its outcome.
func (g *geocoder) geocode(ctx context.Context, name string) outcome {
	var o outcome
	ctx = context.WithValue(ctx, tallyKey{}, &o.tally)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.endpoint+"?"+url.Values{"q": {name}}.Encode(), nil)
	if err != nil {
		return o.failed(name, err)
	}
	if g.key != "" {
		req.Header.Set("X-API-Key", g.key)
	}
	g.waits.add(1) // held until the counting transport sends it
	resp, err := g.client.Do(req)
	g.waits.add(-1)
	if err != nil {
		return o.failed(name, g.explain(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return o.failed(name, fmt.Errorf("reading the answer: %w", err))
	}
	if o.status != http.StatusOK {
		o.line = line(name, o.status, nil, reason(o.status, body))
		return o
	}
	fields, err := members(body)
	if err != nil {
		return o.failed(name, err)
	}
	o.line = line(name, o.status, fields, "")
	return o
}

// explain returns the error of a request that got no answer, in the
// terms of the command line: the method and URL, which the line says, are
// left out, and a wait is weighed against -max-wait.
func (g *geocoder) explain(err error) error {
	if we := (*pace.WaitError)(nil); errors.As(err, &we) {
		return fmt.Errorf("a wait of %v for %s is longer than the %v left of -max-wait %v", we.Wait.Round(time.Millisecond), we.Cause, we.Max, g.maxWait)
	}
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// failed returns o for name that got no usable answer, because of err.
func (o outcome) failed(name string, err error) outcome {
	o.err = true
	o.line = line(name, o.status, nil, err.Error())
	return o
}

// line returns the output line {"query":name,"status":status,fields...}, with
// "error":why unless why is empty.
func line(name string, status int, fields []byte, why string) []byte {
	b := []byte(`{"query":`)
	b, _ = appendJSON(b, name)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, fields...)
	if why != "" {
		b = append(b, `,"error":`...)
		b, _ = appendJSON(b, why)
	}
	return append(b, "}\n"...)
}

// appendJSON appends v in JSON to b.
func appendJSON(b []byte, v any) ([]byte, error) {
	j, err := json.Marshal(v)
	return append(b, j...), err
}

// reason returns why the server answered status: the detail or the title
// of its problem body, else the status's text.
func reason(status int, body []byte) string {
	var p struct{ Title, Detail string }
	if json.Unmarshal(body, &p) == nil {
		if p.Detail != "" {
			return p.Detail
		}
		if p.Title != "" {
			return p.Title
		}
	}
	if text := http.StatusText(status); text != "" {
		return text
	}
	return "status " + strconv.Itoa(status)
}

// members returns the members of the JSON object body, in order and
// compacted, each as `,"name":value`, without those the line writes itself.
func members(body []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("the answer is not a JSON object: %.40q", body)
	}
	var b []byte
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("the answer is not valid JSON: %w", err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("the answer is not valid JSON: %w", err)
		}
		switch name := tok.(string); name {
		case "query", "status", "error":
		default:
			b = append(b, ',')
			b, _ = appendJSON(b, name)
			b = append(b, ':')
			var c bytes.Buffer
			_ = json.Compact(&c, v) // v is valid JSON
			b = append(b, c.Bytes()...)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("the answer is not valid JSON: %w", err)
	}
	return b, nil
}
