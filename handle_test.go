package ratelimit_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/nethttp"
)

// handle runs r through m.Handle with a handler that answers 200 "ok", and
// returns the response and whether the handler ran.
func handle(m *ratelimit.Middleware, r *http.Request) (w *httptest.ResponseRecorder, ran bool) {
	w = httptest.NewRecorder()
	m.Handle(w, r, func(*http.Request) int {
		ran = true
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("ok"))
		return http.StatusOK
	})
	return w, ran
}

// TestHandleConcurrentExactCount: 40 requests at once on one key, burst
// 10, on a clock that does not move: exactly 10 are admitted (their
// handlers run, each with a distinct remaining count 0 to 9) and exactly
// 30 are refused with 429.
func TestHandleConcurrentExactCount(t *testing.T) {
	const n, burst = 40, 10
	lim, err := ratelimit.New(clockStore(t, new(fakeClock)), ratelimit.Policy{Limit: ratelimit.Per(burst, time.Minute)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, nil)
	require.NoError(t, err)

	var (
		wg        sync.WaitGroup
		start     = make(chan struct{})
		ran       atomic.Int64
		codes     [n]int
		remaining [n]string
		ranOK     [n]bool
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("X-Client", "one-key")
			<-start
			w, ok := handle(m, r)
			if ok {
				ran.Add(1)
			}
			codes[i], remaining[i], ranOK[i] = w.Code, field(w.Header(), "RateLimit"), ok
			if w.Code == http.StatusTooManyRequests {
				assert.Equal(t, "6", w.Header().Get("Retry-After"), "request %d", i)
			}
		}()
	}
	close(start)
	wg.Wait()

	admitted, refused := 0, 0
	var rs []string
	for i, code := range codes {
		switch code {
		case http.StatusOK:
			admitted++
			assert.True(t, ranOK[i], "request %d: admitted, so its handler ran", i)
			rs = append(rs, remaining[i])
		case http.StatusTooManyRequests:
			refused++
			assert.False(t, ranOK[i], "request %d: refused, so its handler did not run", i)
			assert.Equal(t, `"default";r=0;t=6`, remaining[i], "request %d", i)
		default:
			t.Errorf("request %d: status %d", i, code)
		}
	}
	assert.Equal(t, burst, admitted, "admitted")
	assert.Equal(t, n-burst, refused, "refused")
	assert.EqualValues(t, burst, ran.Load(), "handlers run")
	var want []string
	for r := range burst {
		want = append(want, fmt.Sprintf(`"default";r=%d;t=6`, r))
	}
	slices.Sort(rs)
	slices.Sort(want)
	assert.Equal(t, want, rs, "each admitted request saw its own decision")
}

// TestOnDenySeesHeaderFields: when a custom deny handler runs, the
// rate-limit header fields of the refusal are already set on w, not only
// Retry-After, in every format.
func TestOnDenySeesHeaderFields(t *testing.T) {
	for _, tc := range []struct {
		format ratelimit.HeaderFormat
		want   map[string]string
	}{
		{ratelimit.HeadersIETF, map[string]string{"RateLimit-Policy": `"default";q=1;w=60`, "RateLimit": `"default";r=0;t=60`}},
		{ratelimit.HeadersLegacy, map[string]string{"RateLimit-Limit": "1", "RateLimit-Remaining": "0", "RateLimit-Reset": "60"}},
		{ratelimit.HeadersX, map[string]string{"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60"}},
	} {
		var seen http.Header
		denied := 0
		lim, err := ratelimit.New(clockStore(t, new(fakeClock)), ratelimit.Policy{Limit: ratelimit.Per(1, time.Minute)})
		require.NoError(t, err)
		m, err := ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{
			Headers: tc.format,
			OnDeny: func(w http.ResponseWriter, r *http.Request, res ratelimit.Result) {
				denied++
				seen = w.Header().Clone()
				w.WriteHeader(http.StatusServiceUnavailable)
			},
		})
		require.NoError(t, err)
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Client", "c")
		w, ran := handle(m, r)
		require.Equal(t, http.StatusOK, w.Code)
		require.True(t, ran)
		w, ran = handle(m, r)
		require.Equal(t, http.StatusServiceUnavailable, w.Code, "format %v: the custom deny answer", tc.format)
		require.False(t, ran)
		require.Equal(t, 1, denied)
		assert.Equal(t, "60", seen.Get("Retry-After"), "format %v", tc.format)
		for name, v := range tc.want {
			assert.Equal(t, []string{v}, seen[name], "format %v: %s set before OnDeny runs", tc.format, name)
		}
		for name := range seen {
			if strings.Contains(strings.ToLower(name), "ratelimit") {
				assert.Contains(t, tc.want, name, "format %v: OnDeny saw %s", tc.format, name)
			}
		}
	}
}

// TestSkipRunsBeforeKey: MiddlewareOptions.Skip is asked before the key function, so
// a skipped request without a key, or whose key function fails or panics,
// is admitted and reaches its handler; the key function is not even called.
// The same requests, not skipped, are answered as errors.
func TestSkipRunsBeforeKey(t *testing.T) {
	lim, err := ratelimit.New(clockStore(t, new(fakeClock)), ratelimit.Policy{Limit: ratelimit.Per(1, time.Minute)})
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		key    ratelimit.KeyFunc
		status int // when not skipped
	}{
		{"no key", ratelimit.KeyByAPIKey("X-API-Key"), http.StatusUnauthorized},
		{"empty key", func(*http.Request) (string, error) { return "", nil }, http.StatusUnauthorized},
		{"failing key function", func(*http.Request) (string, error) { return "", errors.New("no session") }, http.StatusInternalServerError},
		{"panicking key function", func(*http.Request) (string, error) { panic("key function panics") }, http.StatusInternalServerError},
	} {
		var keyCalls atomic.Int64
		key := func(r *http.Request) (string, error) {
			keyCalls.Add(1)
			return tc.key(r)
		}
		m, err := ratelimit.NewMiddleware(lim, key, &ratelimit.MiddlewareOptions{
			Skip:   func(r *http.Request) bool { return r.URL.Path == "/healthz" },
			Logger: discardLogger(),
		})
		require.NoError(t, err)
		for range 3 {
			w, ran := handle(m, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			assert.Equal(t, http.StatusOK, w.Code, "%s: skipped", tc.name)
			assert.True(t, ran, "%s: the handler of a skipped request runs", tc.name)
			assert.Equal(t, "ok", w.Body.String(), tc.name)
			for name := range w.Header() {
				assert.NotContains(t, strings.ToLower(name), "ratelimit", "%s: a skipped request is not decided", tc.name)
			}
		}
		assert.Zero(t, keyCalls.Load(), "%s: the key function is not called for a skipped request", tc.name)

		w, ran := handle(m, httptest.NewRequest(http.MethodGet, "/geocode", nil))
		assert.Equal(t, tc.status, w.Code, "%s: not skipped", tc.name)
		assert.False(t, ran, "%s: not skipped, the handler does not run", tc.name)
		assert.EqualValues(t, 1, keyCalls.Load(), tc.name)
	}
}

// TestHeaderNamesOnTheWire reads the raw bytes of responses from a real
// server: the rate-limit fields go out spelled as the drafts spell them
// ("RateLimit-Policy:", "RateLimit:"), never canonicalised, and a Go
// client, which canonicalises on read, still finds them with Get.
func TestHeaderNamesOnTheWire(t *testing.T) {
	for _, tc := range []struct {
		format ratelimit.HeaderFormat
		opts   ratelimit.MiddlewareOptions
		want   []string // the rate-limit field lines of the first response, in order of name
	}{
		{format: ratelimit.HeadersIETF, want: []string{`RateLimit: "default";r=1;t=30`, `RateLimit-Policy: "default";q=2;w=60`}},
		{format: ratelimit.HeadersIETF, opts: ratelimit.MiddlewareOptions{MaxInFlight: 3}, want: []string{
			`RateLimit: "default";r=1;t=30`,
			`RateLimit-Policy: "default";q=2;w=60,"inflight";q=3;qu="concurrent-requests"`,
		}},
		{format: ratelimit.HeadersLegacy, want: []string{"RateLimit-Limit: 2", "RateLimit-Remaining: 1", "RateLimit-Reset: 30"}},
		{format: ratelimit.HeadersX, want: []string{"X-RateLimit-Limit: 2", "X-RateLimit-Remaining: 1", "X-RateLimit-Reset: 30"}},
	} {
		text, _ := tc.format.MarshalText()
		name := string(text)
		if tc.opts.MaxInFlight > 0 {
			name += "+inflight"
		}
		t.Run(name, func(t *testing.T) {
			lim, err := ratelimit.New(clockStore(t, new(fakeClock)), ratelimit.Policy{Limit: ratelimit.Per(2, time.Minute)})
			require.NoError(t, err)
			opts := tc.opts
			opts.Headers = tc.format
			m, err := ratelimit.NewMiddleware(lim, keyByHeader, &opts)
			require.NoError(t, err)
			srv := httptest.NewServer(nethttp.Wrap(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Write([]byte("ok"))
			})))
			defer srv.Close()

			status, lines := rawGet(t, srv.Listener.Addr().String(), "wire")
			require.Equal(t, "HTTP/1.1 200 OK", status)
			assert.Equal(t, tc.want, rateLimitLines(lines), "the field lines as sent")

			// A Go client canonicalises the names it reads.
			resp, err := srv.Client().Do(newRequest(t, srv.URL, "client"))
			require.NoError(t, err)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			for _, line := range tc.want {
				k, v, _ := strings.Cut(line, ": ")
				assert.Contains(t, resp.Header.Values(k), v, "resp.Header.Get(%q)", k)
			}

			rawGet(t, srv.Listener.Addr().String(), "wire")
			status, lines = rawGet(t, srv.Listener.Addr().String(), "wire")
			require.Equal(t, "HTTP/1.1 429 Too Many Requests", status)
			assert.Contains(t, lines, "Retry-After: 30")
			if tc.format == ratelimit.HeadersIETF {
				assert.Contains(t, lines, `RateLimit: "default";r=0;t=30`, "the refusal, as sent")
				assert.Contains(t, lines, tc.want[1], "the refusal, as sent")
			}
			for _, line := range lines {
				assert.False(t, strings.HasPrefix(strings.ToLower(line), "ratelimit") && !strings.HasPrefix(line, "RateLimit"),
					"canonicalised name on the wire: %q", line)
				assert.False(t, strings.HasPrefix(strings.ToLower(line), "x-ratelimit") && !strings.HasPrefix(line, "X-RateLimit"),
					"canonicalised name on the wire: %q", line)
			}
		})
	}
}

func newRequest(t *testing.T, url, client string) *http.Request {
	t.Helper()
	r, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	require.NoError(t, err)
	r.Header.Set("X-Client", client)
	return r
}

// rawGet sends a GET with X-Client: client to addr over a plain TCP
// connection and returns the status line and the header field lines of the
// response, byte for byte as they came.
func rawGet(t *testing.T, addr, client string) (status string, lines []string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: test\r\nX-Client: "+client+"\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	for i := 0; ; i++ {
		line, err := br.ReadString('\n')
		require.NoError(t, err, "reading the response head")
		require.True(t, strings.HasSuffix(line, "\r\n"), "line %q", line)
		line = strings.TrimSuffix(line, "\r\n")
		if line == "" {
			break
		}
		if i == 0 {
			status = line
		} else {
			lines = append(lines, line)
		}
	}
	io.Copy(io.Discard, br)
	return status, lines
}

// rateLimitLines returns the lines whose field name contains "ratelimit" in
// any case, sorted by name (stably: the lines of one field keep their
// order).
func rateLimitLines(lines []string) []string {
	var out []string
	for _, line := range lines {
		name, _, _ := strings.Cut(line, ":")
		if strings.Contains(strings.ToLower(name), "ratelimit") {
			out = append(out, line)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int {
		na, _, _ := strings.Cut(a, ":")
		nb, _, _ := strings.Cut(b, ":")
		return strings.Compare(na, nb)
	})
	return out
}

// discardLogger is a logger that writes nothing.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// handBuiltStore answers every request as allowed with a Result it builds
// itself, without the Policy, as a decorating store might.
type handBuiltStore struct{}

func (handBuiltStore) Take(context.Context, *ratelimit.Policy, string, int64) (ratelimit.Result, error) {
	return ratelimit.Result{Allowed: true, Remaining: 4}, nil
}

// A store that leaves Result.Policy nil gets the policy it was asked about
// filled in: the middleware answers with its header fields, never panics.
func TestStoreResultWithoutPolicy(t *testing.T) {
	lim, err := ratelimit.New(handBuiltStore{}, ratelimit.Policy{Name: "api", Limit: ratelimit.PerSecond(5)})
	require.NoError(t, err)
	res, err := lim.Take(context.Background(), "k", 1)
	require.NoError(t, err)
	require.NotNil(t, res.Policy)
	assert.Equal(t, "api", res.Policy.Name)

	m, err := ratelimit.NewMiddleware(lim, keyByHeader, nil)
	require.NoError(t, err)
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Client", "c")
	m.Handle(w, r, func(*http.Request) int { return http.StatusOK })
	assert.Equal(t, []string{`"api";r=4`}, w.Header()["RateLimit"])

	two, err := ratelimit.New(handBuiltStore{}, ratelimit.Policy{Name: "a", Limit: ratelimit.PerSecond(5)}, ratelimit.Policy{Name: "b", Limit: ratelimit.Per(5, 24*time.Hour)})
	require.NoError(t, err)
	res, err = two.Take(context.Background(), "k", 1)
	require.NoError(t, err)
	for i, r := range res.Results {
		assert.Same(t, &two.Policies()[i], r.Policy, "the Result of policy %d", i)
	}
}

// A panic in MiddlewareOptions.Skip is answered like one in the key function: 500,
// through the error handler with ErrPanic, and the handler never runs;
// Observe is told, as of every request that fails before its decision.
func TestSkipPanics(t *testing.T) {
	lim, err := ratelimit.New(handBuiltStore{}, ratelimit.Policy{Limit: ratelimit.PerSecond(5)})
	require.NoError(t, err)
	var got error
	var observed []ratelimit.Event
	m, err := ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{
		Skip:    func(*http.Request) bool { panic("boom") },
		OnError: func(w http.ResponseWriter, r *http.Request, err error) { got = err; w.WriteHeader(500) },
		Observe: func(_ *http.Request, e ratelimit.Event) { observed = append(observed, e) },
	})
	require.NoError(t, err)
	w := httptest.NewRecorder()
	ran := false
	m.Handle(w, httptest.NewRequest("GET", "/", nil), func(*http.Request) int { ran = true; return 200 })
	assert.False(t, ran)
	assert.Equal(t, 500, w.Code)
	assert.ErrorIs(t, got, ratelimit.ErrPanic)
	assert.ErrorContains(t, got, "boom")
	require.Len(t, observed, 1, "Observe is told of the failure")
	assert.Same(t, lim, observed[0].Limiter)
	assert.ErrorIs(t, observed[0].Err, ratelimit.ErrPanic)
}
