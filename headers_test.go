package ratelimit_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

func TestAllDryRunWritesNoHeaders(t *testing.T) {
	shadow := ratelimit.Policy{Name: "shadow", Limit: ratelimit.Per(1, time.Minute), DryRun: true}
	for _, format := range []ratelimit.HeaderFormat{ratelimit.HeadersIETF, ratelimit.HeadersLegacy, ratelimit.HeadersX} {
		s := newHarness(t, setup{policies: []ratelimit.Policy{shadow}, opts: &ratelimit.MiddlewareOptions{Headers: format}})
		for range 3 {
			w := s.get("c")
			assert.Equal(t, 200, w.Code)
			for name := range w.Header() {
				assert.NotContains(t, strings.ToLower(name), "ratelimit", "format %v wrote %s", format, name)
			}
		}
	}
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
		h := newHarness(t, setup{limit: ratelimit.Per(1, time.Minute), opts: &ratelimit.MiddlewareOptions{
			Headers: tc.format,
			OnDeny: func(w http.ResponseWriter, r *http.Request, res ratelimit.Result) {
				denied++
				seen = w.Header().Clone()
				w.WriteHeader(http.StatusServiceUnavailable)
			},
		}})
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Client", "c")
		w, ran := h.handle(r)
		require.Equal(t, http.StatusOK, w.Code)
		require.True(t, ran)
		w, ran = h.handle(r)
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
			opts := tc.opts
			opts.Headers = tc.format
			srv := httptest.NewServer(newHarness(t, setup{limit: ratelimit.Per(2, time.Minute), opts: &opts}))
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

func TestRetryAfterRoundsUp(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		want     string
	}{
		{200 * time.Millisecond, "1"},
		{time.Second, "1"},
		{1200 * time.Millisecond, "2"},
		{time.Second + time.Nanosecond, "2"},
		{time.Nanosecond, "1"},
	} {
		s := newHarness(t, setup{limit: ratelimit.Per(1, tc.interval)})
		require.Equal(t, 200, s.get("c").Code)
		w := s.get("c")
		require.Equal(t, 429, w.Code)
		assert.Equal(t, tc.want, w.Header().Get("Retry-After"), "wait %v", tc.interval)
	}
}

func TestRetryJitter(t *testing.T) {
	s := newHarness(t, setup{limit: ratelimit.Per(1, time.Second), opts: &ratelimit.MiddlewareOptions{RetryJitter: 10 * time.Second}})
	require.Equal(t, 200, s.get("c").Code)
	seen := map[string]bool{}
	for range 200 {
		w := s.get("c")
		require.Equal(t, 429, w.Code)
		ra, err := strconv.Atoi(w.Header().Get("Retry-After"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, ra, 1, "never earlier than the real wait")
		require.LessOrEqual(t, ra, 11)
		assert.Equal(t, `"default";r=0;t=`+strconv.Itoa(ra), field(w.Header(), "RateLimit"), "t never earlier than Retry-After")
		seen[w.Header().Get("Retry-After")] = true
	}
	assert.Greater(t, len(seen), 5, "Retry-After values spread: %v", seen)
}

// RetryJitter never makes Retry-After earlier than the real wait, however
// long the wait: a 50-year ban with the longest jitter, and a wait a
// nanosecond short of the longest Duration, where the sum saturates.
func TestRetryJitterNeverShortens(t *testing.T) {
	const fiftyYears = 50 * 365 * 24 * time.Hour
	for _, wait := range []time.Duration{fiftyYears, math.MaxInt64 - 1, math.MaxInt64} {
		refuse := storeFunc(func(context.Context, *ratelimit.Policy, string, int64) (ratelimit.Result, error) {
			return ratelimit.Result{RetryAfter: wait, ResetAfter: wait}, nil
		})
		s := newHarness(t, setup{limit: ratelimit.PerSecond(1), store: refuse, opts: &ratelimit.MiddlewareOptions{RetryJitter: time.Hour}})
		least := int64(wait / time.Second)
		if wait%time.Second != 0 {
			least++
		}
		for range 50 {
			w := s.get("c")
			require.Equal(t, 429, w.Code)
			ra, err := strconv.ParseInt(w.Header().Get("Retry-After"), 10, 64)
			require.NoError(t, err)
			require.GreaterOrEqual(t, ra, least, "Retry-After for a wait of %v", wait)
			require.LessOrEqual(t, ra, least+3600, "Retry-After for a wait of %v", wait)
		}
	}
}

// A middleware after this one that writes into a field's value in place
// (h["RateLimit"][0] = …) changes that response only: a second client
// making the same requests gets the same fields as the first one.
func TestHeaderValuesOwnedByResponse(t *testing.T) {
	for _, opts := range []ratelimit.MiddlewareOptions{
		{Headers: ratelimit.HeadersIETF}, {Headers: ratelimit.HeadersLegacy}, {Headers: ratelimit.HeadersX},
		{Headers: ratelimit.HeadersIETF, MaxInFlight: 5}, // RateLimit-Policy lists "inflight" too
	} {
		f := opts.Headers
		s := newHarness(t, setup{limit: ratelimit.PerSecond(1).WithBurst(2), opts: &opts})
		var first []http.Header
		for _, client := range []string{"a", "b"} {
			for i := range 3 { // two allowed, one refused
				h := s.get(client).Header()
				if client == "a" {
					first = append(first, h.Clone())
				} else {
					assert.Equal(t, first[i], h, "format %v, MaxInFlight %d: request %d of client b", f, opts.MaxInFlight, i+1)
				}
				for _, v := range h {
					v[0] = "edited"
				}
			}
		}
	}
}

func TestHeaderFormats(t *testing.T) {
	want := map[ratelimit.HeaderFormat]map[string]string{
		ratelimit.HeadersIETF:   {"RateLimit-Policy": `"default";q=10;w=2`, "RateLimit": `"default";r=9;t=1`},
		ratelimit.HeadersLegacy: {"RateLimit-Limit": "10", "RateLimit-Remaining": "9", "RateLimit-Reset": "1"},
		ratelimit.HeadersX:      {"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "9", "X-RateLimit-Reset": "1"},
		ratelimit.HeadersNone:   {},
	}
	all := []string{"RateLimit-Policy", "RateLimit", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
	for f, fields := range want {
		s := newHarness(t, setup{limit: ratelimit.PerSecond(5).WithBurst(10), opts: &ratelimit.MiddlewareOptions{Headers: f, Cost: costByHeader}})
		h := s.get("c").Header()
		for _, name := range all {
			assert.Equal(t, fields[name], field(h, name), "format %v, field %s", f, name)
		}
		var names, wantNames []string // exactly these keys, spelled as the drafts do
		for name := range h {
			if strings.Contains(strings.ToLower(name), "ratelimit") {
				names = append(names, name)
			}
		}
		for name := range fields {
			wantNames = append(wantNames, name)
		}
		assert.ElementsMatch(t, wantNames, names, "format %v: rate-limit keys", f)
		s.get("c", "X-Cost", "9")
		w := s.get("c")
		require.Equal(t, 429, w.Code)
		assert.Equal(t, "1", w.Header().Get("Retry-After"), "format %v: Retry-After is always sent", f)
	}
}

func TestDryRunOverHTTP(t *testing.T) {
	shadow := ratelimit.Policy{Name: "shadow", Limit: ratelimit.Per(1, time.Minute), DryRun: true}
	s := newHarness(t, setup{policies: []ratelimit.Policy{perKey, shadow}})
	for range 3 {
		w := s.get("a")
		require.Equal(t, 200, w.Code, "a dry-run policy never refuses")
		assert.Equal(t, `"per-key";q=10;w=2`, field(w.Header(), "RateLimit-Policy"), "and is invisible by default")
	}

	s = newHarness(t, setup{policies: []ratelimit.Policy{perKey, shadow}, opts: &ratelimit.MiddlewareOptions{DryRunHeaders: true}})
	w := s.get("a")
	assert.Equal(t, `"per-key";q=10;w=2,"shadow";q=1;w=60`, field(w.Header(), "RateLimit-Policy"))
	assert.Equal(t, `"shadow";r=0;t=60`, field(w.Header(), "RateLimit"), "shown when asked")
	w = s.get("a")
	assert.Equal(t, 200, w.Code)
	assert.Equal(t, `"shadow";r=0;t=60`, field(w.Header(), "RateLimit"))
}

// TestDryRunHeadersOnRefusals: with DryRunHeaders, a refusal's RateLimit
// is the refusing policy's, so that its t is Retry-After (jitter
// included), even when a dry-run policy would wait longer; and
// RateLimit-Policy lists every policy on every answer, in-flight
// refusals included, as one valid list.
func TestDryRunHeadersOnRefusals(t *testing.T) {
	perKey := ratelimit.Policy{Name: "per-key", Limit: ratelimit.PerSecond(2).WithBurst(4)}
	dry := ratelimit.Policy{Name: "dry", Limit: ratelimit.Per(3, time.Minute), DryRun: true}
	for _, jitter := range []time.Duration{0, 3 * time.Second} {
		s := newHarness(t, setup{policies: []ratelimit.Policy{perKey, dry}, opts: &ratelimit.MiddlewareOptions{DryRunHeaders: true, RetryJitter: jitter}})
		for range 4 {
			require.Equal(t, 200, s.get("a").Code)
		}
		w := s.get("a")
		require.Equal(t, 429, w.Code)
		assert.Equal(t, `"per-key";q=4;w=2,"dry";q=3;w=60`, field(w.Header(), "RateLimit-Policy"))
		assert.Equal(t, `"per-key";r=0;t=`+w.Header().Get("Retry-After"), field(w.Header(), "RateLimit"), "jitter %v", jitter)
	}

	m := newHarness(t, setup{policies: []ratelimit.Policy{dry}, opts: &ratelimit.MiddlewareOptions{DryRunHeaders: true, MaxInFlight: 1}}).m
	request := func() *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Client", "a")
		return r
	}
	first, second := httptest.NewRecorder(), httptest.NewRecorder()
	m.Handle(first, request(), func(*http.Request) (int, int64) {
		m.Handle(second, request(), func(*http.Request) (int, int64) { return 200, 0 }) // while the first holds the slot
		return 200, 0
	})
	require.Equal(t, 429, second.Code)
	assert.Equal(t, `"dry";q=3;w=60,"inflight";q=1;qu="concurrent-requests"`, field(second.Header(), "RateLimit-Policy"))
	assert.Equal(t, `"dry";q=3;w=60,"inflight";q=1;qu="concurrent-requests"`, field(first.Header(), "RateLimit-Policy"), "the same list when allowed")
}

// TestFieldNamesCanonical: every rate-limit field a Middleware writes, in
// every format, allowed or refused, replaces a value set earlier under the
// spelling that h.Set gives its name (http.CanonicalHeaderKey's), so that
// the response carries it once, as the drafts spell it.
func TestFieldNamesCanonical(t *testing.T) {
	for _, opts := range []ratelimit.MiddlewareOptions{
		{Headers: ratelimit.HeadersIETF}, {Headers: ratelimit.HeadersLegacy}, {Headers: ratelimit.HeadersX},
		{Headers: ratelimit.HeadersIETF, MaxInFlight: 5}, // RateLimit-Policy lists "inflight" too
	} {
		h := newHarness(t, setup{limit: ratelimit.Per(2, time.Minute), opts: &opts})
		var written []http.Header // client a's: two allowed, one refused
		names := map[string]bool{}
		for range 3 {
			header := h.get("a").Header()
			written = append(written, header)
			for name := range header {
				if strings.Contains(strings.ToLower(name), "ratelimit") {
					names[name] = true
				}
			}
		}
		require.NotEmpty(t, names, "format %v: the fields written", opts.Headers)
		setEarlier := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for name := range names {
				w.Header().Set(name, "earlier")
			}
			h.ServeHTTP(w, r)
		})
		for i, want := range written { // client b's, the same requests over the earlier values
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("X-Client", "b")
			got := serve(setEarlier, r).Header()
			for name := range names {
				assert.Equal(t, want[name], got[name], "format %v, MaxInFlight %d, request %d: %s", opts.Headers, opts.MaxInFlight, i+1, name)
				if canonical := http.CanonicalHeaderKey(name); canonical != name {
					assert.NotContains(t, got, canonical, "format %v, MaxInFlight %d, request %d: %s as h.Set spells it", opts.Headers, opts.MaxInFlight, i+1, name)
				}
			}
		}
	}
}

// A calendar quota's RateLimit-Policy has w = the length of the day at
// the Middleware's Clock, 23 or 25 hours on a daylight-saving change; its
// RateLimit and Retry-After count to its reset.
func TestQuotaFields(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	for _, tc := range []struct {
		at     time.Time // UTC
		w      string
		toNext int // seconds to the next midnight in Paris
	}{
		{time.Date(2026, 3, 29, 10, 0, 0, 0, time.UTC), "82800", 12 * 3600},  // midnight at 22:00 UTC
		{time.Date(2026, 10, 25, 10, 0, 0, 0, time.UTC), "90000", 13 * 3600}, // midnight at 23:00 UTC
		{time.Date(2026, 6, 1, 21, 59, 59, 0, time.UTC), "86400", 1},
	} {
		var h *harness
		h = newHarness(t, setup{
			policies: []ratelimit.Policy{{Limit: ratelimit.PerSecond(5).WithBurst(10)}, {Name: "daily", Limit: ratelimit.Daily(3, paris)}},
			opts:     &ratelimit.MiddlewareOptions{Clock: func() time.Time { return h.clock.Now() }},
		})
		h.clock.Advance(tc.at.Sub(h.clock.Now()))
		toNext := strconv.Itoa(tc.toNext)
		w := h.get("a")
		assert.Equal(t, `"default";q=10;w=2,"daily";q=3;w=`+tc.w, field(w.Header(), "RateLimit-Policy"), tc.at)
		assert.Equal(t, `"daily";r=2;t=`+toNext, field(w.Header(), "RateLimit"), tc.at)
		h.get("a")
		h.get("a")
		w = h.get("a")
		require.Equal(t, http.StatusTooManyRequests, w.Code, tc.at)
		assert.Equal(t, toNext, w.Header().Get("Retry-After"), tc.at)
		assert.Equal(t, `"daily";r=0;t=`+toNext, field(w.Header(), "RateLimit"), tc.at)
		res, err := h.lim.Take(context.Background(), "a", 0)
		require.NoError(t, err)
		assert.Equal(t, int64(7), res.Results[0].Remaining, "%v: the refused request took nothing from the rate", tc.at)
	}
}

// The header fields show each key's own limit (Policy.LimitFor).
func TestLimitForFields(t *testing.T) {
	h := newHarness(t, setup{policies: []ratelimit.Policy{{Limit: ratelimit.Per(10, time.Minute),
		LimitFor: func(key string) (ratelimit.Limit, bool) { return ratelimit.Per(100, time.Minute), key == "gold" }}}})
	for range 2 {
		w := h.get("gold")
		assert.Equal(t, `"default";q=100;w=60`, field(w.Header(), "RateLimit-Policy"))
		w = h.get("plain")
		assert.Equal(t, `"default";q=10;w=60`, field(w.Header(), "RateLimit-Policy"))
	}
	assert.Equal(t, `"default";r=97;t=1`, field(h.get("gold").Header(), "RateLimit"))
	h = newHarness(t, setup{policies: h.lim.Policies(), opts: &ratelimit.MiddlewareOptions{Headers: ratelimit.HeadersLegacy}})
	assert.Equal(t, "100", field(h.get("gold").Header(), "RateLimit-Limit"))
	assert.Equal(t, "10", field(h.get("plain").Header(), "RateLimit-Limit"))
}

// A store that leaves Result.Policy nil gets the policy it was asked
// about filled in: the middleware answers with its header fields, never
// panics.
func TestStoreResultWithoutPolicyFields(t *testing.T) {
	h := newHarness(t, setup{policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(5)}}, store: handBuiltStore{}})
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Client", "c")
	w, _ := h.handle(r)
	assert.Equal(t, []string{`"api";r=4`}, w.Header()["RateLimit"])
}

func TestPoliciesOverHTTP(t *testing.T) {
	s := newHarness(t, setup{policies: []ratelimit.Policy{perKey, daily, global}})
	w := s.get("a")
	require.Equal(t, 200, w.Code)
	assert.Equal(t, `"per-key";q=10;w=2,"daily";q=10000;w=86400,"global";q=4;w=1`, field(w.Header(), "RateLimit-Policy"))
	assert.Equal(t, `"global";r=3;t=1`, field(w.Header(), "RateLimit"), "the policy closest to exhaustion")

	for _, c := range []string{"b", "c", "d"} {
		require.Equal(t, 200, s.get(c).Code)
	}
	w = s.get("e")
	require.Equal(t, 429, w.Code, "the global burst of 4 is spent")
	assert.Equal(t, `"global";r=0;t=1`, field(w.Header(), "RateLimit"))
	var body map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
	assert.Equal(t, []any{"global"}, body["violated-policies"])

	// Both policies refuse: the longest wait is Retry-After and binds the
	// RateLimit field, and the body names both.
	slow := ratelimit.Policy{Name: "slow", Limit: ratelimit.Per(1, 10*time.Second)}
	fast := ratelimit.Policy{Name: "fast", Limit: ratelimit.Per(1, 2*time.Second), Global: true}
	s = newHarness(t, setup{policies: []ratelimit.Policy{fast, slow}})
	require.Equal(t, 200, s.get("a").Code)
	w = s.get("a")
	require.Equal(t, 429, w.Code)
	assert.Equal(t, "10", w.Header().Get("Retry-After"))
	assert.Equal(t, `"slow";r=0;t=10`, field(w.Header(), "RateLimit"))
	body = nil
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
	assert.Equal(t, []any{"fast", "slow"}, body["violated-policies"])
}

func TestPoliciesCostAboveOneBurst(t *testing.T) {
	s := newHarness(t, setup{policies: []ratelimit.Policy{perKey, global}, opts: &ratelimit.MiddlewareOptions{Cost: costByHeader}})
	w := s.get("a", "X-Cost", "5")
	assert.Equal(t, http.StatusBadRequest, w.Code, "the global burst of 4 can never allow a cost of 5")
	assert.Equal(t, 200, s.get("a", "X-Cost", "4").Code)
}
