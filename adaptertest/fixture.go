package adaptertest

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/fakeclock"
	"github.com/tokenfair/ratelimit/internal/quick"
	"github.com/tokenfair/ratelimit/memorystore"
)

// setup describes the limiter of a test, one for each side.
type setup struct {
	limit ratelimit.Limit
	unit  string // of the policy; "": requests
	opts  *ratelimit.MiddlewareOptions
	store ratelimit.Store // nil: a memorystore for each side
}

// side is one of the two servers of a fixture.
type side struct {
	srv   *httptest.Server
	calls atomic.Int64 // runs of next
	// A request for /block signals entered, then waits for release.
	entered, release chan struct{}
}

// fixture is the adapter under test and the reference.
type fixture struct {
	t            *testing.T
	adapter, ref *side
}

func newFixture(t *testing.T, nh NewHandler, s setup) *fixture {
	t.Helper()
	f := &fixture{t: t}
	f.adapter = newSide(t, s, func(l *ratelimit.Limiter, next http.Handler) http.Handler {
		h := nh(t, l, key, s.opts, next)
		require.NotNil(t, h, "NewHandler returned nil")
		return h
	})
	f.ref = newSide(t, s, func(l *ratelimit.Limiter, next http.Handler) http.Handler {
		m, err := ratelimit.NewMiddleware(l, key, s.opts)
		require.NoError(t, err)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var panicked any
			m.Handle(w, r, func(r *http.Request) (status int, written int64) {
				sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
				status, panicked = quick.Run(func() { next.ServeHTTP(sw, r) }, func() (int, bool) { return sw.status, sw.sent })
				if sw.hijacked {
					return status, -1
				}
				return status, sw.bytes
			})
			if panicked != nil {
				panic(panicked)
			}
		})
	})
	return f
}

func newSide(t *testing.T, s setup, build func(*ratelimit.Limiter, http.Handler) http.Handler) *side {
	t.Helper()
	l := newLimiter(t, s.store, s.limit, s.unit)
	sd := &side{entered: make(chan struct{}, 1), release: make(chan struct{}, 1)}
	sd.srv = httptest.NewServer(build(l, next(sd)))
	t.Cleanup(sd.srv.Close)
	return sd
}

// newLimiter returns a limiter of one policy, "per-key", of limit l in
// unit, on store, or on a memorystore whose clock never moves if store is
// nil.
func newLimiter(t *testing.T, store ratelimit.Store, l ratelimit.Limit, unit string) *ratelimit.Limiter {
	t.Helper()
	if store == nil {
		ms, err := memorystore.New(&memorystore.Options{Clock: new(fakeclock.Clock).Now})
		require.NoError(t, err)
		store = ms
	}
	lim, err := ratelimit.New(store, ratelimit.Policy{Name: "per-key", Limit: l, Unit: unit})
	require.NoError(t, err)
	return lim
}

// statusWriter records the status of next's answer, which always calls
// WriteHeader.
type statusWriter struct {
	http.ResponseWriter
	status   int   // the response's status: 200 until another is written
	sent     bool  // the status is final
	bytes    int64 // of the body, written
	hijacked bool  // next took the connection over
}

func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	s.sent, s.hijacked = true, true
	return http.NewResponseController(s.ResponseWriter).Hijack()
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.sent && code >= 200 {
		s.status, s.sent = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.sent = true
	n, err := s.ResponseWriter.Write(b)
	s.bytes += int64(n)
	return n, err
}

// next is the rest of the chain: it counts its runs and answers with
// header fields and a body of its own, which the adapter must leave alone.
// It answers /status/NNN with status NNN, /implicit with a body and no
// WriteHeader (so 200), /bytes/N with a body of N bytes, holds /block until
// released, panics on /panic, on /abort panics after it has sent a 200 and
// part of the body, settles /settle/N at a cost of N (ratelimit.Settle),
// its error in X-Settle, and on /hijack/N takes the connection over and
// writes a response of N bytes on it itself.
func next(sd *side) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sd.calls.Add(1)
		status := http.StatusOK
		if code, ok := strings.CutPrefix(r.URL.Path, "/status/"); ok {
			status, _ = strconv.Atoi(code)
		}
		if n, ok := strings.CutPrefix(r.URL.Path, "/bytes/"); ok {
			size, _ := strconv.Atoi(n)
			io.WriteString(w, strings.Repeat("x", size))
			return
		}
		if n, ok := strings.CutPrefix(r.URL.Path, "/hijack/"); ok {
			size, _ := strconv.Atoi(n)
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			defer conn.Close()
			fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", size, strings.Repeat("x", size))
			_ = buf.Flush()
			return
		}
		if n, ok := strings.CutPrefix(r.URL.Path, "/settle/"); ok {
			cost, _ := strconv.ParseInt(n, 10, 64)
			settled := "ok"
			if err := ratelimit.Settle(r.Context(), "requests", cost); err != nil {
				settled = err.Error()
			}
			w.Header().Set("X-Settle", settled)
		}
		switch r.URL.Path {
		case "/block":
			sd.entered <- struct{}{}
			<-sd.release
		case "/result": // what ratelimit.ResultFrom finds in the request next receives
			res, ok := ratelimit.ResultFrom(r.Context())
			w.Header().Set("X-Result", strconv.FormatBool(ok)+" "+strconv.FormatInt(res.Remaining, 10))
		case "/panic":
			panic(http.ErrAbortHandler) // the server closes the connection
		case "/abort": // the client hung up mid-body, as httputil.ReverseProxy reports it
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "the first part")
			http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Next", "ran")
		if r.URL.Path != "/implicit" {
			w.WriteHeader(status)
		}
		io.WriteString(w, "next: "+r.Method+" "+r.URL.Path+"\n")
	})
}

// request is one request of a test.
type request struct {
	method string // GET if empty
	path   string // "/geocode" if empty
	client string // X-Client; none if empty
}

// response is an answer as the client sees it.
type response struct {
	Status int
	Header http.Header // without Date
	Body   string
}

// do sends req to sd. It may be called from any goroutine.
func (sd *side) do(req request) (response, error) {
	method, path := cmp.Or(req.method, http.MethodGet), cmp.Or(req.path, "/geocode")
	r, err := http.NewRequest(method, sd.srv.URL+path, nil)
	if err != nil {
		return response{}, err
	}
	r.Header.Set(keyHeader, req.client)
	resp, err := sd.srv.Client().Do(r)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	resp.Header.Del("Date")
	return response{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}, err
}

// must sends req to sd and requires an answer.
func (sd *side) must(t *testing.T, req request) response {
	t.Helper()
	r, err := sd.do(req)
	require.NoError(t, err)
	return r
}

// send sends req to the reference and to the adapter, requires identical
// answers and the same number of runs of next, and returns the adapter's
// answer.
func (f *fixture) send(req request) response {
	f.t.Helper()
	want, got := f.ref.must(f.t, req), f.adapter.must(f.t, req)
	require.Equal(f.t, want, got, "%s %s with %s: %q: the adapter's answer differs from net/http's", req.method, req.path, keyHeader, req.client)
	require.Equal(f.t, f.ref.calls.Load(), f.adapter.calls.Load(), "%s %s: runs of next", req.method, req.path)
	return got
}

// assertNextRan checks that r is next's answer, untouched but for the
// rate-limit header fields.
func assertNextRan(t *testing.T, req request, r response) {
	t.Helper()
	assert.Equal(t, "ran", r.Header.Get("X-Next"))
	assert.Equal(t, "text/plain; charset=utf-8", r.Header.Get("Content-Type"))
	if req.method != http.MethodHead {
		path, _, _ := strings.Cut(cmp.Or(req.path, "/geocode"), "?")
		assert.Equal(t, "next: "+cmp.Or(req.method, http.MethodGet)+" "+path+"\n", r.Body)
	}
}

// assertStopped checks an answer written by the middleware: the chain
// stopped before next.
func assertStopped(t *testing.T, r response, status int) {
	t.Helper()
	assert.Equal(t, status, r.Status)
	assert.Empty(t, r.Header.Get("X-Next"), "next must not run")
}
