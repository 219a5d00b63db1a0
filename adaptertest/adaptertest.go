// Package adaptertest is a conformance suite for the framework adapters of
// [ratelimit.Middleware]. Every adapter in this project passes it (nethttp,
// and the ginlimit and echolimit modules), and so should yours:
//
//	func TestConformance(t *testing.T) {
//		adaptertest.Run(t, func(t *testing.T, l *ratelimit.Limiter, key ratelimit.KeyFunc,
//			opts *ratelimit.MiddlewareOptions, next http.Handler) http.Handler {
//			m, err := ratelimit.NewMiddleware(l, key, opts)
//			require.NoError(t, err)
//			engine := myframework.New()
//			engine.Use(myadapter.Middleware(m))
//			engine.Any("/*", myframework.Wrap(next))
//			return engine
//		})
//	}
//
// The suite builds the limiters (on stores whose clock never moves),
// stores and options; the adapter only puts the middleware in front of
// next inside its framework's real engine. Each test sends the same
// requests over real HTTP connections to the adapter and to a reference,
// the core middleware on a bare net/http server, and requires identical
// answers on the wire (status, every header field but Date, body bytes)
// and the same number of runs of next.
//
// It checks what an adapter is responsible for: next runs only when the
// request is admitted, and its answer reaches the client untouched; a
// refusal or an error (default or custom handlers, GET or HEAD) stops the
// chain and is the core's answer; the status of the response reaches
// Options.CountIf, also for a response whose handler panicked after it
// began; an in-flight slot (Options.MaxInFlight) is held while
// next runs and released after it, also when it panics; Options.Skip; the
// address lists (Options.Block answers 403, Options.Safe skips); the
// rate-limit field names reach the wire as the core spells them
// ("RateLimit-Policy", not "Ratelimit-Policy"), which a Go client, since
// it canonicalises names, cannot see: that test reads the raw response;
// and next receives the request that ratelimit.ResultFrom reads
// (Options.ResultInContext).
// What the core decides alone is tested in package ratelimit.
package adaptertest

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/quick"
	"github.com/tokenfair/ratelimit/memorystore"
)

// NewHandler returns the handler of a framework's engine in which the
// adapter under test limits requests with l, keyed by key, configured by
// opts, in front of next. next must be reachable for every method and path.
// It may register cleanups with t.
type NewHandler func(t *testing.T, l *ratelimit.Limiter, key ratelimit.KeyFunc, opts *ratelimit.MiddlewareOptions, next http.Handler) http.Handler

// Run runs the conformance suite against the handlers made by newHandler.
func Run(t *testing.T, newHandler NewHandler) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, NewHandler)
	}{
		{"Admitted", testAdmitted},
		{"Refused", testRefused},
		{"Errors", testErrors},
		{"CustomHandlers", testCustomHandlers},
		{"CountIf", testCountIf},
		{"Aborted", testAborted},
		{"InFlight", testInFlight},
		{"Skip", testSkip},
		{"AddressLists", testAddressLists},
		{"FieldNames", testFieldNames},
		{"ResultFrom", testResultFrom},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newHandler) })
	}
}

const (
	keyHeader = "X-Client" // the request header field of the suite's key function
	keyError  = "error"    // the value of keyHeader that makes it fail
)

// key is the suite's key function: the X-Client field, ErrMissingKey
// without it, and an error (500) for keyError.
func key(r *http.Request) (string, error) {
	switch v := r.Header.Get(keyHeader); v {
	case "":
		return "", ratelimit.ErrMissingKey
	case keyError:
		return "", errors.New("adaptertest: key function failed")
	default:
		return "client:" + v, nil
	}
}

// setup describes the limiter of a test, one for each side.
type setup struct {
	limit ratelimit.Limit
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
			m.Handle(w, r, func(r *http.Request) (status int) {
				sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
				status, panicked = quick.Run(func() { next.ServeHTTP(sw, r) }, func() (int, bool) { return sw.status, sw.sent })
				return status
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
	store := s.store
	if store == nil {
		epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		ms, err := memorystore.New(&memorystore.Options{Clock: func() time.Time { return epoch }})
		require.NoError(t, err)
		store = ms
	}
	l, err := ratelimit.New(store, ratelimit.Policy{Name: "per-key", Limit: s.limit})
	require.NoError(t, err)
	sd := &side{entered: make(chan struct{}, 1), release: make(chan struct{}, 1)}
	sd.srv = httptest.NewServer(build(l, next(sd)))
	t.Cleanup(sd.srv.Close)
	return sd
}

// statusWriter records the status of next's answer, which always calls
// WriteHeader.
type statusWriter struct {
	http.ResponseWriter
	status int  // the response's status: 200 until another is written
	sent   bool // the status is final
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.sent && code >= 200 {
		s.status, s.sent = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.sent = true
	return s.ResponseWriter.Write(b)
}

// next is the rest of the chain: it counts its runs and answers with
// header fields and a body of its own, which the adapter must leave alone.
// It answers /status/NNN with status NNN, /implicit with a body and no
// WriteHeader (so 200), holds /block until released, panics on /panic, and
// on /abort panics after it has sent a 200 and part of the body.
func next(sd *side) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sd.calls.Add(1)
		status := http.StatusOK
		if code, ok := strings.CutPrefix(r.URL.Path, "/status/"); ok {
			status, _ = strconv.Atoi(code)
		}
		switch r.URL.Path {
		case "/block":
			sd.entered <- struct{}{}
			<-sd.release
		case "/panic":
			panic(http.ErrAbortHandler) // the server closes the connection
		case "/result": // what ratelimit.ResultFrom finds in the request next receives
			res, ok := ratelimit.ResultFrom(r.Context())
			w.Header().Set("X-Result", strconv.FormatBool(ok)+" "+strconv.FormatInt(res.Remaining, 10))
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

// testResultFrom: with ResultInContext, next's request carries the
// decision, which ratelimit.ResultFrom reads; without, it carries none.
func testResultFrom(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(5, time.Minute), opts: &ratelimit.MiddlewareOptions{ResultInContext: true}})
	for _, want := range []string{"true 4", "true 3"} {
		req := request{path: "/result", client: "alice"}
		r := f.send(req)
		assertNextRan(t, req, r)
		assert.Equal(t, want, r.Header.Get("X-Result"), "ResultFrom in next: found, remaining")
	}
	f = newFixture(t, nh, setup{limit: ratelimit.Per(5, time.Minute)})
	assert.Equal(t, "false 0", f.send(request{path: "/result", client: "alice"}).Header.Get("X-Result"), "without ResultInContext")
}

func testAdmitted(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(5, time.Minute)})
	for _, req := range []request{
		{client: "alice"},
		{method: http.MethodPost, path: "/other/path?q=1", client: "alice"},
		{method: http.MethodHead, client: "alice"},
		{path: "/status/201", client: "bob"},
	} {
		r := f.send(req)
		assertNextRan(t, req, r)
		assert.NotEmpty(t, r.Header.Get("RateLimit"), "the core's header fields")
	}
	assert.EqualValues(t, 4, f.adapter.calls.Load())
}

func testRefused(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(2, time.Minute)})
	for range 2 {
		f.send(request{client: "alice"})
	}
	for _, req := range []request{
		{client: "alice"},
		{method: http.MethodHead, client: "alice"},
		{method: http.MethodPost, path: "/other", client: "alice"},
	} {
		r := f.send(req)
		assertStopped(t, r, http.StatusTooManyRequests)
		assert.Equal(t, "30", r.Header.Get("Retry-After"))
	}
	assert.EqualValues(t, 2, f.adapter.calls.Load())
}

// failingStore is a store whose every call fails.
type failingStore struct{}

func (failingStore) Take(context.Context, *ratelimit.Policy, string, int64) (ratelimit.Result, error) {
	return ratelimit.Result{}, errors.New("adaptertest: store down")
}

func testErrors(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(5, time.Minute)})
	down := newFixture(t, nh, setup{limit: ratelimit.Per(5, time.Minute), store: failingStore{}})
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		assertStopped(t, f.send(request{method: method}), http.StatusUnauthorized)
		assertStopped(t, f.send(request{method: method, client: keyError}), http.StatusInternalServerError)
		r := down.send(request{method: method, client: "alice"})
		assertStopped(t, r, http.StatusServiceUnavailable)
		assert.Equal(t, "1", r.Header.Get("Retry-After"))
	}
	assert.Zero(t, f.adapter.calls.Load()+down.adapter.calls.Load())
}

// testCustomHandlers: answers that the adapter cannot take for JSON (a
// plain-text refusal) as well as ones it can (an application/json error).
func testCustomHandlers(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(1, time.Minute), opts: &ratelimit.MiddlewareOptions{
		OnDeny: func(w http.ResponseWriter, _ *http.Request, res ratelimit.Result) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, "slow down, "+res.Policy.Name+"\n")
		},
		OnError: func(w http.ResponseWriter, _ *http.Request, err error) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"error":"no entry"}`+"\n")
		},
	}})
	f.send(request{client: "alice"})
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		r := f.send(request{method: method, client: "alice"})
		assertStopped(t, r, http.StatusTooManyRequests)
		assert.Equal(t, "text/plain; charset=utf-8", r.Header.Get("Content-Type"))
		r = f.send(request{method: method})
		assertStopped(t, r, http.StatusForbidden)
		assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
	}
	assert.Equal(t, "slow down, per-key\n", f.send(request{client: "alice"}).Body)
	assert.Equal(t, `{"error":"no entry"}`+"\n", f.send(request{}).Body)
	assert.EqualValues(t, 1, f.adapter.calls.Load())
}

func testCountIf(t *testing.T, nh NewHandler) {
	// The login guard: two failures a minute, successes never count. The
	// adapter must hand the core the status of the response, before the
	// client has it.
	seen := make(chan int, 20)
	f := newFixture(t, nh, setup{limit: ratelimit.Per(2, time.Minute), opts: &ratelimit.MiddlewareOptions{
		CountIf: func(status int) bool {
			seen <- status
			return status >= 400
		},
	}})
	for _, status := range []int{200, 204, 201, 0, 401, 500} {
		path := "/status/" + strconv.Itoa(status)
		if status == 0 { // no WriteHeader: the status is 200
			path, status = "/implicit", http.StatusOK
		}
		f.send(request{client: "alice", path: path})
		require.Len(t, seen, 2, "CountIf runs once on each side")
		assert.Equal(t, [2]int{status, status}, [2]int{<-seen, <-seen}, "the status CountIf saw for %s: reference, adapter", path)
	}
	assertStopped(t, f.send(request{client: "alice"}), http.StatusTooManyRequests)
	assert.Zero(t, len(seen), "CountIf saw a refused request")
}

// testAborted: a response counts once it has begun, whatever happens after;
// only a handler that wrote nothing and panicked gets its cost back. The
// adapter must report the status of a response whose handler panicked
// after it began (a download whose client hung up: httputil.ReverseProxy
// panics with http.ErrAbortHandler), and let the panic go on.
func testAborted(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(1, time.Minute), opts: &ratelimit.MiddlewareOptions{
		CountIf: func(status int) bool { return status < 400 }, // downloads count, failures do not
	}})
	for _, sd := range []*side{f.ref, f.adapter} {
		for range 3 {
			_, err := sd.do(request{client: "alice", path: "/panic"})
			require.Error(t, err, "the server closes the connection")
		}
		_, err := sd.do(request{client: "alice", path: "/abort"})
		require.Error(t, err, "the body is cut short")
		r := sd.must(t, request{client: "alice", path: "/abort"})
		assertStopped(t, r, http.StatusTooManyRequests)
	}
	assert.Equal(t, f.ref.calls.Load(), f.adapter.calls.Load())
	assert.EqualValues(t, 4, f.adapter.calls.Load(), "three panics that wrote nothing were given back; the begun download counted")
}

// testInFlight: with one request at a time per key, the slot is held while
// next runs and released when it returns, or panics. The adapter must run
// the rest of the chain inside the core's Handle.
func testInFlight(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(100, time.Minute), opts: &ratelimit.MiddlewareOptions{MaxInFlight: 1}})
	var answers [2][5]response // reference, adapter
	for i, sd := range []*side{f.ref, f.adapter} {
		errs := make(chan error, 1)
		go func() {
			var err error
			answers[i][2], err = sd.do(request{path: "/block", client: "alice"})
			errs <- err
		}()
		<-sd.entered
		answers[i][0] = sd.must(t, request{client: "alice"})
		answers[i][1] = sd.must(t, request{client: "bob"})
		sd.release <- struct{}{}
		require.NoError(t, <-errs)
		answers[i][3] = sd.must(t, request{client: "alice"})
		// A POST, which the client does not retry on a closed connection.
		_, err := sd.do(request{method: http.MethodPost, path: "/panic", client: "alice"})
		require.Error(t, err, "next panicked: the server drops the connection")
		answers[i][4] = sd.must(t, request{client: "alice"})
	}
	require.Equal(t, answers[0], answers[1], "the adapter's answers differ from net/http's")
	got := answers[1]
	assertStopped(t, got[0], http.StatusTooManyRequests)
	for _, r := range got[1:] {
		assert.Equal(t, http.StatusOK, r.Status)
		assert.Equal(t, "ran", r.Header.Get("X-Next"))
	}
	assert.EqualValues(t, 5, f.adapter.calls.Load())
}

func testSkip(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(1, time.Minute), opts: &ratelimit.MiddlewareOptions{
		Skip: func(r *http.Request) bool { return r.URL.Path == "/healthz" },
	}})
	f.send(request{client: "alice"})
	assertStopped(t, f.send(request{client: "alice"}), http.StatusTooManyRequests)
	for _, client := range []string{"alice", "", keyError} {
		req := request{client: client, path: "/healthz"}
		r := f.send(req)
		assertNextRan(t, req, r)
		assert.Empty(t, r.Header.Get("RateLimit"), "a skipped request is not decided")
	}
	assert.EqualValues(t, 4, f.adapter.calls.Load())
}

// testAddressLists: the suite's clients connect from loopback addresses,
// which one fixture blocks (403 before the key function: GET and HEAD)
// and another treats as safe (never limited, no rate-limit fields, even
// without a key).
func testAddressLists(t *testing.T, nh NewHandler) {
	loopback := []string{"127.0.0.0/8", "::1"}
	blocked := newFixture(t, nh, setup{limit: ratelimit.Per(1, time.Minute), opts: &ratelimit.MiddlewareOptions{Block: loopback}})
	for _, req := range []request{{client: "alice"}, {method: http.MethodHead, client: "alice"}, {}} {
		r := blocked.send(req)
		assertStopped(t, r, http.StatusForbidden)
		assert.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
		assert.Empty(t, r.Header.Get("RateLimit"), "a blocked request is not decided")
	}
	safe := newFixture(t, nh, setup{limit: ratelimit.Per(1, time.Minute), opts: &ratelimit.MiddlewareOptions{Safe: loopback}})
	for _, client := range []string{"alice", "alice", "", keyError} {
		req := request{client: client}
		r := safe.send(req)
		assertNextRan(t, req, r)
		assert.Empty(t, r.Header.Get("RateLimit"), "a safe request is not decided")
	}
	assert.Zero(t, blocked.adapter.calls.Load())
	assert.EqualValues(t, 4, safe.adapter.calls.Load())
}

// testFieldNames: the adapter sends the rate-limit fields under the very
// names, in the very order, that the reference sends, byte for byte (the
// drafts' spelling, "RateLimit-Policy:" and "RateLimit:"), on an admitted
// and on a refused request.
func testFieldNames(t *testing.T, nh NewHandler) {
	f := newFixture(t, nh, setup{limit: ratelimit.Per(1, time.Minute)})
	for _, status := range []string{"200 OK", "429 Too Many Requests"} {
		want := rawRateLimitLines(t, f.ref, "alice", status)
		got := rawRateLimitLines(t, f.adapter, "alice", status)
		assert.Equal(t, want, got, "%s: the rate-limit field lines as sent", status)
		var names []string
		for _, line := range got {
			name, _, _ := strings.Cut(line, ":")
			names = append(names, name)
		}
		assert.Equal(t, []string{"RateLimit-Policy", "RateLimit"}, names, "%s: the field names as the drafts spell them", status)
	}
}

// rawRateLimitLines sends a GET for client to sd over a plain TCP
// connection, requires the status line "HTTP/1.1 " + status, and returns
// the header field lines whose name contains "ratelimit" in any case,
// byte for byte as they came, sorted.
func rawRateLimitLines(t *testing.T, sd *side, client, status string) []string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", sd.srv.Listener.Addr().String(), 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = io.WriteString(conn, "GET /geocode HTTP/1.1\r\nHost: adaptertest\r\n"+keyHeader+": "+client+"\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	var lines []string
	for i := 0; ; i++ {
		line, err := br.ReadString('\n')
		require.NoError(t, err, "reading the response head")
		line = strings.TrimSuffix(line, "\r\n")
		if line == "" {
			break
		}
		if i == 0 {
			require.Equal(t, "HTTP/1.1 "+status, line, "status line")
			continue
		}
		if name, _, _ := strings.Cut(line, ":"); strings.Contains(strings.ToLower(name), "ratelimit") {
			lines = append(lines, line)
		}
	}
	io.Copy(io.Discard, br)
	slices.Sort(lines)
	return lines
}
