package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/tokenfair/ratelimit/storetest"
)

func TestMain(m *testing.M) {
	// Redis answers within milliseconds on loopback, but these tests share
	// two loaded cores; a call over the demo's 100 ms would fail over and
	// upset exact counts. The tests of a refused Redis still fail at once.
	redisTimeout, redisClientTimeout = 2*time.Second, 5*time.Second
	goleak.VerifyTestMain(m)
}

// newTestHandler builds the server's handler from command-line args, as run
// does, with a fake clock that stands still until advanced.
func newTestHandler(t *testing.T, args ...string) (http.Handler, *storetest.Clock) {
	t.Helper()
	return newHandlerWith(t, nil, args...)
}

// newHandlerWith is newTestHandler, with set changing the parsed
// configuration (if not nil) before the handler is built.
func newHandlerWith(t *testing.T, set func(*config), args ...string) (http.Handler, *storetest.Clock) {
	t.Helper()
	var cfg config
	fs := newFlagSet(&cfg)
	fs.SetOutput(io.Discard)
	require.NoError(t, fs.Parse(args))
	require.NoError(t, cfg.check())
	clock := new(storetest.Clock)
	cfg.clock = clock.Now
	if set != nil {
		set(&cfg)
	}
	h, cleanup, err := newHandler(cfg)
	require.NoError(t, err)
	t.Cleanup(cleanup)
	return h, clock
}

// request describes one in-process request.
type request struct {
	method, target string
	apiKey         string // X-API-Key, if not empty
	remoteAddr     string // if not empty
	forwardedFor   string // X-Forwarded-For, if not empty
	body           string
}

// field returns the first value of the header field name spelled exactly
// so, or "". The rate-limit fields go out as the drafts spell them
// ("RateLimit-Policy"), and h.Get, which canonicalises the name to
// "Ratelimit-Policy", does not find them in a recorder's header map; a
// client's response (canonicalised on read) keeps h.Get.
func field(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func serve(h http.Handler, req request) *httptest.ResponseRecorder {
	method := req.method
	if method == "" {
		method = http.MethodGet
	}
	r := httptest.NewRequest(method, req.target, strings.NewReader(req.body))
	if req.apiKey != "" {
		r.Header.Set("X-API-Key", req.apiKey)
	}
	if req.remoteAddr != "" {
		r.RemoteAddr = req.remoteAddr
	}
	if req.forwardedFor != "" {
		r.Header.Set("X-Forwarded-For", req.forwardedFor)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// statuses serves req n times and returns the status codes.
func statuses(h http.Handler, req request, n int) []int {
	codes := make([]int, n)
	for i := range codes {
		codes[i] = serve(h, req).Code
	}
	return codes
}

func repeat(code, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = code
	}
	return s
}

func decode(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &v), "body %q", w.Body.String())
	return v
}

func TestGeocode(t *testing.T) {
	h, _ := newTestHandler(t)
	for _, tc := range []struct {
		name        string
		req         request
		wantStatus  int
		wantType    string
		wantPlace   string
		wantLat     float64
		wantLon     float64
		wantDetail  string
		wantAllowed string
	}{
		{name: "known place", req: request{target: "/geocode?q=Paris"}, wantStatus: 200, wantType: "application/json", wantPlace: "Paris", wantLat: 48.8566, wantLon: 2.3522},
		{name: "case and spaces ignored", req: request{target: "/geocode?q=%20NEW%20%20york"}, wantStatus: 200, wantType: "application/json", wantPlace: "New York", wantLat: 40.7128, wantLon: -74.0060},
		{name: "lower case", req: request{target: "/geocode?q=tokyo"}, wantStatus: 200, wantType: "application/json", wantPlace: "Tokyo", wantLat: 35.6762, wantLon: 139.6503},
		{name: "unknown place", req: request{target: "/geocode?q=atlantis"}, wantStatus: 404, wantType: "application/problem+json", wantDetail: "unknown place"},
		{name: "missing q", req: request{target: "/geocode"}, wantStatus: 400, wantType: "application/problem+json", wantDetail: "missing query parameter q"},
		{name: "empty q", req: request{target: "/geocode?q=%20"}, wantStatus: 400, wantType: "application/problem+json", wantDetail: "missing query parameter q"},
		{name: "POST", req: request{method: "POST", target: "/geocode?q=paris"}, wantStatus: 405, wantType: "application/problem+json", wantAllowed: "GET, HEAD"},
		{name: "DELETE", req: request{method: "DELETE", target: "/geocode?q=paris"}, wantStatus: 405, wantType: "application/problem+json", wantAllowed: "GET, HEAD"},
		{name: "unknown path", req: request{target: "/nowhere"}, wantStatus: 404, wantType: "application/problem+json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.apiKey = "key-" + tc.name // a bucket of its own
			w := serve(h, tc.req)
			require.Equal(t, tc.wantStatus, w.Code, "body %q", w.Body.String())
			assert.Equal(t, tc.wantType, w.Header().Get("Content-Type"))
			assert.Equal(t, tc.wantAllowed, w.Header().Get("Allow"))
			assert.NotEmpty(t, field(w.Header(), "RateLimit"), "every limited route carries RateLimit")
			body := decode(t, w)
			if tc.wantStatus != 200 {
				assert.EqualValues(t, tc.wantStatus, body["status"])
				if tc.wantDetail != "" {
					assert.Equal(t, tc.wantDetail, body["detail"])
				}
				return
			}
			assert.Equal(t, tc.wantPlace, body["name"])
			assert.Equal(t, tc.wantLat, body["lat"])
			assert.Equal(t, tc.wantLon, body["lon"])
		})
	}
}

func TestGeocodeBodyShape(t *testing.T) {
	h, _ := newTestHandler(t)
	w := serve(h, request{target: "/geocode?q=Paris", apiKey: "demo"})
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `{"query":"Paris","name":"Paris","lat":48.8566,"lon":2.3522}`+"\n", w.Body.String())
}

func TestGeocodeHEAD(t *testing.T) {
	h, _ := newTestHandler(t)
	w := serve(h, request{method: http.MethodHead, target: "/geocode?q=london", apiKey: "demo"})
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
}

func TestPlacesTable(t *testing.T) {
	assert.GreaterOrEqual(t, len(places), 20)
	for _, name := range []string{"paris", "tokyo", "new york", "london", "sydney"} {
		p, ok := lookup(name)
		if assert.True(t, ok, "lookup(%q)", name) {
			assert.True(t, -90 <= p.Lat && p.Lat <= 90 && -180 <= p.Lon && p.Lon <= 180, "lookup(%q) = %+v", name, p)
		}
	}
}

func TestHealthzNeverLimited(t *testing.T) {
	h, _ := newTestHandler(t, "-rate", "1", "-burst", "2")
	spent := request{target: "/geocode?q=paris", apiKey: "demo"}
	require.Equal(t, []int{200, 200, 429}, statuses(h, spent, 3))

	for _, req := range []request{
		{target: "/healthz", apiKey: "demo"},
		{target: "/healthz"}, // no key: no 401 either
		{method: http.MethodHead, target: "/healthz"},
	} {
		for i := range 20 {
			w := serve(h, req)
			require.Equal(t, http.StatusOK, w.Code, "%s %s #%d", req.method, req.target, i)
			assert.Empty(t, field(w.Header(), "RateLimit"))
			assert.Empty(t, w.Header().Get("Retry-After"))
		}
	}
	w := serve(h, request{target: "/healthz"})
	assert.Equal(t, "ok\n", w.Body.String())

	w = serve(h, request{method: http.MethodPost, target: "/healthz"})
	assert.Equal(t, http.StatusMethodNotAllowed, w.Code)
	assert.Equal(t, "GET, HEAD", w.Header().Get("Allow"))

	assert.Equal(t, http.StatusTooManyRequests, serve(h, spent).Code, "/healthz must not refill the bucket")
}

func TestMissingAPIKey(t *testing.T) {
	h, _ := newTestHandler(t)
	for _, key := range []string{"", "   "} {
		r := httptest.NewRequest(http.MethodGet, "/geocode?q=paris", nil)
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		assert.Equal(t, http.StatusUnauthorized, w.Code, "X-API-Key %q", key)
		assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
		assert.EqualValues(t, 401, decode(t, w)["status"])
	}
}

// TestWorkedExample is the example of the design over HTTP: 5 tokens per
// second, burst 10, twelve requests at once, then one second later.
func TestWorkedExample(t *testing.T) {
	h, clock := newTestHandler(t, "-rate", "5", "-burst", "10")
	req := request{target: "/geocode?q=paris", apiKey: "alice"}

	var ws []*httptest.ResponseRecorder
	for range 12 {
		ws = append(ws, serve(h, req))
	}
	codes := make([]int, len(ws))
	for i, w := range ws {
		codes[i] = w.Code
	}
	require.Equal(t, append(repeat(200, 10), 429, 429), codes)

	first := ws[0].Header()
	assert.Equal(t, `"default";q=10;w=2`, field(first, "RateLimit-Policy"))
	assert.Equal(t, `"default";r=9;t=1`, field(first, "RateLimit"))
	assert.Equal(t, `"default";r=0;t=1`, field(ws[9].Header(), "RateLimit"))
	assert.Empty(t, first.Get("Retry-After"))

	for _, w := range ws[10:] {
		assert.Equal(t, "1", w.Header().Get("Retry-After"))
		assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
		assert.Equal(t, "no-store", w.Header().Get("Cache-Control"))
		assert.Equal(t, `"default";q=10;w=2`, field(w.Header(), "RateLimit-Policy"))
		assert.Equal(t, `"default";r=0;t=1`, field(w.Header(), "RateLimit"))
		body := decode(t, w)
		assert.EqualValues(t, 429, body["status"])
		assert.Equal(t, []any{"default"}, body["violated-policies"])
	}

	clock.Advance(time.Second)
	assert.Equal(t, append(repeat(200, 5), 429), statuses(h, req, 6), "one second later")
}

// TestAlgorithms: leaky-police makes the token bucket's decisions; with
// leaky-shape one more request is admitted (it runs at once, ten queue) and
// the queued ones are held for their turn.
func TestAlgorithms(t *testing.T) {
	req := request{target: "/geocode?q=paris", apiKey: "alice"}
	h, _ := newTestHandler(t, "-algorithm", "leaky-police", "-rate", "5", "-burst", "10")
	assert.Equal(t, append(repeat(200, 10), 429, 429), statuses(h, req, 12), "leaky-police")

	h, _ = newTestHandler(t, "-algorithm", "leaky-shape", "-rate", "1000", "-burst", "10")
	start := time.Now()
	assert.Equal(t, append(repeat(200, 11), 429), statuses(h, req, 12), "leaky-shape")
	// The test's clock stands still, so the queued requests waited 1 ms,
	// 2 ms, … 10 ms of real time, one after the other.
	assert.GreaterOrEqual(t, time.Since(start), 55*time.Millisecond)
}

// TestShapingWithinWriteTimeout: with -algorithm leaky-shape -rate 0.09
// -burst 2 the queue's room (22.2 s) is longer than the server's
// WriteTimeout (10 s): a request that would wait 11.1 s is refused at
// once, with Retry-After until its wait fits (9 s of it: 2.1 s, so 3),
// instead of waiting past the write deadline.
func TestShapingWithinWriteTimeout(t *testing.T) {
	req := request{target: "/geocode?q=paris", apiKey: "alice"}
	h, _ := newTestHandler(t, "-algorithm", "leaky-shape", "-rate", "0.09", "-burst", "2")
	require.Equal(t, http.StatusOK, serve(h, req).Code)
	start := time.Now()
	w := serve(h, req)
	assert.Less(t, time.Since(start), time.Second, "refused at once")
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "3", w.Header().Get("Retry-After"))
}

// TestMaxQueued: -max-queued bounds the requests waiting in leaky-shape
// queues across clients, and -max-inflight-total the requests running
// (or waiting) in all. Alice's second request waits a second of real time
// (the test's clock stands still); meanwhile bob's is refused.
func TestMaxQueued(t *testing.T) {
	alice, bob := request{target: "/geocode?q=paris", apiKey: "alice"}, request{target: "/geocode?q=paris", apiKey: "bob"}
	for _, tc := range []struct {
		flag   string
		bob    []int // bob's requests while alice's waits
		policy string
	}{
		{"-max-queued", []int{200, 429}, "default"},          // bob's first runs at once, his second would wait
		{"-max-inflight-total", []int{429, 429}, "inflight"}, // alice's waiting request holds the one slot
	} {
		t.Run(tc.flag, func(t *testing.T) {
			h, _ := newTestHandler(t, "-algorithm", "leaky-shape", "-rate", "1", "-burst", "10", tc.flag, "1")
			require.Equal(t, http.StatusOK, serve(h, alice).Code)
			done := make(chan int)
			go func() { done <- serve(h, alice).Code }()
			time.Sleep(100 * time.Millisecond) // alice's request waits
			start := time.Now()
			var last *httptest.ResponseRecorder
			codes := make([]int, len(tc.bob))
			for i := range codes {
				last = serve(h, bob)
				codes[i] = last.Code
			}
			assert.Less(t, time.Since(start), 500*time.Millisecond, "refused at once")
			assert.Equal(t, tc.bob, codes)
			assert.Equal(t, "1", last.Header().Get("Retry-After"))
			var body map[string]any
			require.NoError(t, json.Unmarshal(last.Body.Bytes(), &body))
			assert.Equal(t, []any{tc.policy}, body["violated-policies"])
			assert.Equal(t, http.StatusOK, <-done)
		})
	}
}

// TestGlobalLimit: three clients, three requests each, under -global-burst
// 4: four pass in all; the headers list both policies.
func TestGlobalLimit(t *testing.T) {
	h, _ := newTestHandler(t, "-global-rate", "100", "-global-burst", "4")
	var codes []int
	for _, key := range []string{"a", "b", "c"} {
		for range 3 {
			w := serve(h, request{target: "/geocode?q=paris", apiKey: key})
			codes = append(codes, w.Code)
			assert.Equal(t, `"default";q=10;w=2,"global";q=4;w=1`, field(w.Header(), "RateLimit-Policy"))
		}
	}
	assert.Equal(t, []int{200, 200, 200, 200, 429, 429, 429, 429, 429}, codes)
	w := serve(h, request{target: "/geocode?q=paris", apiKey: "d"})
	assert.Equal(t, []any{"global"}, decode(t, w)["violated-policies"])
}

// TestDryRun: -dry-run decides and counts, never refuses.
func TestDryRun(t *testing.T) {
	h, _ := newTestHandler(t, "-dry-run", "-burst", "2")
	assert.Equal(t, repeat(200, 5), statuses(h, request{target: "/geocode?q=paris", apiKey: "a"}, 5))
}

func TestOtherAPIKeyUnaffected(t *testing.T) {
	h, _ := newTestHandler(t, "-rate", "5", "-burst", "10")
	alice := request{target: "/geocode?q=paris", apiKey: "alice"}
	bob := request{target: "/geocode?q=paris", apiKey: "bob"}
	require.Equal(t, append(repeat(200, 10), 429), statuses(h, alice, 11))

	w := serve(h, bob)
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"default";r=9;t=1`, field(w.Header(), "RateLimit"))
	assert.Equal(t, append(repeat(200, 9), 429), statuses(h, bob, 10))
}

// TestConcurrentRequests checks that requests racing for one bucket are
// admitted exactly up to the burst.
func TestConcurrentRequests(t *testing.T) {
	h, _ := newTestHandler(t, "-rate", "5", "-burst", "10")
	const n = 100
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = serve(h, request{target: "/geocode?q=sydney", apiKey: "racer"}).Code
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	assert.Equal(t, map[int]int{200: 10, 429: n - 10}, count)
}

func TestKeyByIPTrustedProxies(t *testing.T) {
	h, _ := newTestHandler(t, "-key", "ip", "-trusted-proxies", "10.0.0.0/8", "-rate", "1", "-burst", "2")
	const proxy = "10.1.2.3:40000"
	viaProxy := func(xff string) request {
		return request{target: "/geocode?q=rome", remoteAddr: proxy, forwardedFor: xff}
	}

	// Two clients behind the proxy have buckets of their own.
	assert.Equal(t, []int{200, 200, 429}, statuses(h, viaProxy("203.0.113.7"), 3))
	assert.Equal(t, []int{200, 200, 429}, statuses(h, viaProxy("198.51.100.8"), 3))

	// The client is the rightmost entry that is not a trusted proxy: a forged
	// leftmost entry, or more trusted hops, do not give it a fresh bucket.
	for _, xff := range []string{
		"192.0.2.99, 203.0.113.7",
		"1.1.1.1, 8.8.8.8, 203.0.113.7, 10.9.9.9",
	} {
		assert.Equal(t, http.StatusTooManyRequests, serve(h, viaProxy(xff)).Code, "X-Forwarded-For: %s", xff)
	}

	// An API key is not needed with -key ip.
	w := serve(h, viaProxy("192.0.2.1"))
	assert.Equal(t, http.StatusOK, w.Code)

	// A peer that is not a trusted proxy is the client, whatever it forwards.
	direct := request{target: "/geocode?q=rome", remoteAddr: "192.0.2.50:1234"}
	direct.forwardedFor = "203.0.113.77"
	assert.Equal(t, []int{200, 200, 429}, statuses(h, direct, 3))
	direct.forwardedFor = "203.0.113.78"
	assert.Equal(t, http.StatusTooManyRequests, serve(h, direct).Code)
}

func TestKeyByIPIgnoresForwardedWithoutTrustedProxies(t *testing.T) {
	h, _ := newTestHandler(t, "-key", "ip", "-rate", "1", "-burst", "2")
	req := func(xff string) request {
		return request{target: "/geocode?q=cairo", remoteAddr: "10.1.2.3:40000", forwardedFor: xff}
	}
	assert.Equal(t, []int{200, 200}, []int{serve(h, req("203.0.113.7")).Code, serve(h, req("198.51.100.8")).Code})
	assert.Equal(t, http.StatusTooManyRequests, serve(h, req("192.0.2.1")).Code, "every X-Forwarded-For is the same client: the peer")
	assert.Equal(t, http.StatusTooManyRequests, serve(h, req("")).Code)

	other := request{target: "/geocode?q=cairo", remoteAddr: "10.1.2.4:40000"}
	assert.Equal(t, http.StatusOK, serve(h, other).Code, "another peer")
}

func TestHeaderFormats(t *testing.T) {
	all := []string{
		"RateLimit-Policy", "RateLimit",
		"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset",
		"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
	}
	for _, tc := range []struct {
		format        string
		want, want429 map[string]string
	}{
		{
			format:  "ietf",
			want:    map[string]string{"RateLimit-Policy": `"default";q=2;w=2`, "RateLimit": `"default";r=1;t=1`},
			want429: map[string]string{"RateLimit-Policy": `"default";q=2;w=2`, "RateLimit": `"default";r=0;t=1`},
		},
		{
			format:  "legacy",
			want:    map[string]string{"RateLimit-Limit": "2", "RateLimit-Remaining": "1", "RateLimit-Reset": "1"},
			want429: map[string]string{"RateLimit-Limit": "2", "RateLimit-Remaining": "0", "RateLimit-Reset": "2"},
		},
		{
			format:  "x",
			want:    map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "1"},
			want429: map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "2"},
		},
		{format: "none", want: map[string]string{}, want429: map[string]string{}},
	} {
		t.Run(tc.format, func(t *testing.T) {
			h, _ := newTestHandler(t, "-headers", tc.format, "-rate", "1", "-burst", "2")
			req := request{target: "/geocode?q=berlin", apiKey: "demo"}
			for i, want := range []map[string]string{tc.want, {}, tc.want429} {
				w := serve(h, req)
				if i == 1 {
					continue // the second 200
				}
				got := map[string]string{}
				for _, name := range all {
					if v := field(w.Header(), name); v != "" {
						got[name] = v
					}
				}
				assert.Equal(t, want, got, "response %d", i+1)
				if i == 2 {
					assert.Equal(t, http.StatusTooManyRequests, w.Code)
					assert.Equal(t, "1", w.Header().Get("Retry-After"))
				} else {
					assert.Empty(t, w.Header().Get("Retry-After"))
				}
			}
		})
	}
}

// TestFlagDefaults checks the flags and defaults of the contract.
func TestFlagDefaults(t *testing.T) {
	want := map[string]string{
		"addr":               ":8080",
		"framework":          "nethttp",
		"algorithm":          "token-bucket",
		"rate":               "5",
		"burst":              "10",
		"key":                "api-key",
		"trusted-proxies":    "",
		"global-rate":        "0",
		"global-burst":       "0",
		"headers":            "ietf",
		"store":              "memory",
		"redis-url":          "redis://127.0.0.1:6379/0",
		"redis-sentinel":     "",
		"redis-cluster":      "",
		"on-store-error":     "open",
		"otlp":               "",
		"otlp-interval":      "10s",
		"instances":          "1",
		"dry-run":            "false",
		"count":              "all",
		"skip-path":          "",
		"max-inflight":       "0",
		"max-inflight-total": "0",
		"max-queued":         "0",
		"refusal-cache":      "true",
		"lease":              "0s",
		"ban-after":          "0",
		"ban-within":         "0s",
		"ban-for":            "0s",
		"block":              "",
		"safe":               "",
		"admin-token":        "",
		"ipv6-prefix":        "0",
		"daily":              "0",
		"monthly":            "0",
		"daily-bytes":        "0",
		"tz":                 "UTC",
		"plans":              "",
		"grpc-addr":          "",
	}
	var cfg config
	fs := newFlagSet(&cfg)
	got := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { got[f.Name] = f.DefValue })
	assert.Equal(t, want, got)
	require.NoError(t, fs.Parse(nil))
	assert.NoError(t, cfg.check(), "the defaults are supported")
}

// runExit calls run with args and returns its exit status and standard error.
func runExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a command line that is accepted must not keep serving
	// nor listen beyond loopback: a later -addr in args still wins.
	code := run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), &stdout, &stderr)
	return code, stderr.String()
}

func TestRunInvalidFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-rate", "-1"}, "geocoding: -rate -1 -burst 10: "},
		{[]string{"-rate", "0"}, "geocoding: -rate 0 "},
		{[]string{"-rate", "NaN"}, "geocoding: -rate NaN "},
		{[]string{"-rate", "+Inf"}, "geocoding: -rate +Inf "},
		{[]string{"-rate", "fast"}, `invalid value "fast" for flag -rate`},
		{[]string{"-burst", "0"}, "geocoding: -burst 0: want a capacity of at least 1"},
		{[]string{"-burst", "-3"}, "geocoding: -burst -3: want a capacity of at least 1"},
		{[]string{"-rate", "1e10"}, "geocoding: -rate 1e+10 -burst 10: more than one token per nanosecond"},
		{[]string{"-rate", "3e8"}, "geocoding: -rate 3e+08 -burst 10: ratelimit: policy \"default\": PerSecond(300000000).WithBurst(10): a token every 3ns is more than 0.1% off the rate"},
		{[]string{"-rate", "1e-9"}, "geocoding: -rate 1e-09 -burst 10: an empty bucket would take 317 years to fill, more than 50"},
		{[]string{"-rate", "1e-8", "-burst", "20"}, `geocoding: -rate 1e-08 -burst 20: ratelimit: policy "default": Per(20, 555555h33m20s): an empty bucket would take 20 × 27777h46m40s to fill, more than 50 years`},
		{[]string{"-global-rate", "1e-12"}, "geocoding: -rate 5 -burst 10 -global-rate 1e-12 -global-burst 0: "},
		{[]string{"-burst", "1.5"}, "flag -burst"},
		{[]string{"-headers", "bogus"}, `geocoding: invalid value "bogus" for flag -headers: ratelimit: unknown header format "bogus": want one of ["ietf" "legacy" "x" "none"]`},
		{[]string{"-key", "foo"}, "geocoding: -key foo: want api-key or ip"},
		{[]string{"-key", "ip", "-trusted-proxies", "10.0.0.0/33"}, "geocoding: -trusted-proxies: "},
		{[]string{"-key", "ip", "-trusted-proxies", "10.0.0.0/8,proxy.local"}, `-trusted-proxies: ratelimit: KeyByIP: TrustedProxies entry "proxy.local": want a CIDR prefix or an IP address`},
		{[]string{"-trusted-proxies", "nonsense"}, "geocoding: -trusted-proxies: "},
		{[]string{"-framework", "bogus"}, "geocoding: -framework bogus: want nethttp, gin or echo"},
		{[]string{"-algorithm", "fixed-window"}, `geocoding: invalid value "fixed-window" for flag -algorithm: ratelimit: unknown algorithm "fixed-window": want one of ["token-bucket" "leaky-police" "leaky-shape"]`},
		{[]string{"-store", "etcd"}, "geocoding: -store etcd: want memory or redis"},
		{[]string{"-on-store-error", "panic"}, `geocoding: invalid value "panic" for flag -on-store-error: failover: unknown mode "panic": want open, closed or local`},
		{[]string{"-count", "some"}, "geocoding: -count some: want all, failed or successful"},
		{[]string{"-global-rate", "-1"}, "geocoding: -global-rate -1: "},
		{[]string{"-global-rate", "NaN"}, "geocoding: -global-rate NaN: "},
		{[]string{"-global-burst", "-1"}, "geocoding: -global-burst -1: "},
		{[]string{"-instances", "0"}, "geocoding: -instances 0: want at least 1"},
		{[]string{"-max-inflight", "-1"}, "geocoding: -max-inflight -1: "},
		{[]string{"-max-inflight-total", "-1"}, "geocoding: -max-inflight-total -1: want a number of requests, or 0 for no limit"},
		{[]string{"-max-queued", "-2"}, "geocoding: -max-queued -2: want a number of requests, 0 for the library's default (256), or -1 for no bound"},
		{[]string{"-skip-path", "static"}, "geocoding: -skip-path static: want a path prefix starting with /"},
		{[]string{"-ipv6-prefix", "129"}, "geocoding: -ipv6-prefix 129: want 1 to 128 bits, or 0 for the library's default (64)"},
		{[]string{"-ipv6-prefix", "-1"}, "geocoding: -ipv6-prefix -1: want 1 to 128 bits, or 0 for the library's default (64)"},
		{[]string{"-tz", "Mars/Olympus"}, "geocoding: -tz Mars/Olympus: unknown time zone; want an IANA name such as Europe/Paris, or UTC"},
		{[]string{"-daily", "100", "-tz", "Europe/Pariss"}, "geocoding: -tz Europe/Pariss: unknown time zone"},
		{[]string{"-daily", "-1"}, "geocoding: -daily -1: want a quota of 1 to 1000000000000 requests, or 0 for none"},
		{[]string{"-monthly", "1000000000001"}, "geocoding: -monthly 1000000000001: want a quota of 1 to 1000000000000 requests, or 0 for none"},
		{[]string{"-daily-bytes", "-1"}, "geocoding: -daily-bytes -1: want a quota of 1 to 1000000000000 bytes, or 0 for none"},
		{[]string{"-daily-bytes", "1000000000001"}, "geocoding: -daily-bytes 1000000000001: want a quota of 1 to 1000000000000 bytes, or 0 for none"},
		{[]string{"-daily-bytes", "1e6"}, `invalid value "1e6" for flag -daily-bytes`},
		{[]string{"-plans", "plans.json", "-key", "ip"}, "geocoding: -plans plans.json: needs -key api-key: its keys are API keys"},
		{[]string{"-plans", "/nonexistent/plans.json"}, "geocoding: -plans: open /nonexistent/plans.json: no such file or directory"},
		{[]string{"-nosuchflag"}, "flag provided but not defined: -nosuchflag"},
		{[]string{"extra"}, `geocoding: unexpected argument "extra"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stderr := runExit(t, tc.args...)
			assert.Equal(t, 2, code)
			assert.Contains(t, stderr, tc.want)
			assert.NotContains(t, stderr, "listening")
		})
	}
}

func TestRunAcceptedFlags(t *testing.T) {
	t.Run("accepted", func(t *testing.T) {
		var cfg config
		fs := newFlagSet(&cfg)
		require.NoError(t, fs.Parse([]string{"-on-store-error", "open", "-instances", "1", "-dry-run=false",
			"-count", "all", "-global-rate", "0", "-global-burst", "0", "-max-inflight", "0", "-skip-path", "",
			"-refusal-cache=false", "-redis-url", "redis://example:6379/1", "-key", "ip", "-headers", "none", "-framework", "gin"}))
		assert.NoError(t, cfg.check())
	})

	t.Run("every framework", func(t *testing.T) {
		for _, fw := range []string{"nethttp", "gin", "echo"} {
			var cfg config
			fs := newFlagSet(&cfg)
			require.NoError(t, fs.Parse([]string{"-framework", fw}))
			assert.NoError(t, cfg.check(), "-framework %s", fw)
		}
	})

	t.Run("all at once", func(t *testing.T) {
		code, stderr := runExit(t, "-framework", "fasthttp", "-key", "foo")
		assert.Equal(t, 2, code)
		assert.Equal(t, "geocoding: -framework fasthttp: want nethttp, gin or echo\n"+
			"geocoding: -key foo: want api-key or ip\n", stderr)
	})
}

func TestRunHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"-h"}, &stdout, &stderr)
	assert.Equal(t, 0, code)
	assert.Empty(t, stderr.String())
	for _, name := range []string{"-addr", "-rate", "-burst", "-key", "-trusted-proxies", "-headers", "-max-inflight"} {
		assert.Contains(t, stdout.String(), name)
	}
}

func TestRunListenError(t *testing.T) {
	code, stderr := runExit(t, "-addr", "127.0.0.1:-1")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "cannot listen")
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader at a time.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var listeningRE = regexp.MustCompile(`geocoding: listening on (http://[^"\s]+)`)

// TestRunEndToEnd runs the real server on a free loopback port, with the
// real clock, and stops it as SIGINT would.
func TestRunEndToEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout bytes.Buffer
	var stderr syncBuffer
	done := make(chan int, 1)
	// A slow refill: no token comes back during the test.
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-rate", "0.01", "-burst", "3"}, &stdout, &stderr)
	}()

	var base string
	require.Eventually(t, func() bool {
		m := listeningRE.FindStringSubmatch(stderr.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, 5*time.Second, 10*time.Millisecond, "no listening line; stderr:\n%s", &stderr)

	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 5 * time.Second}
	get := func(path, apiKey string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		require.NoError(t, err)
		if apiKey != "" {
			req.Header.Set("X-API-Key", apiKey)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, body
	}

	resp, body := get("/healthz", "")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "ok\n", string(body))

	resp, body = get("/geocode?q=Tokyo", "e2e")
	require.Equal(t, http.StatusOK, resp.StatusCode, "body %s", body)
	var place geocodeResult
	require.NoError(t, json.Unmarshal(body, &place))
	assert.Equal(t, geocodeResult{Query: "Tokyo", Name: "Tokyo", Lat: 35.6762, Lon: 139.6503}, place)
	assert.Equal(t, `"default";q=3;w=300`, resp.Header.Get("RateLimit-Policy"))

	for range 2 {
		resp, _ = get("/geocode?q=tokyo", "e2e")
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	}
	resp, body = get("/geocode?q=tokyo", "e2e")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	assert.Contains(t, string(body), `"violated-policies":["default"]`)

	resp, _ = get("/geocode?q=tokyo", "")
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	cancel()
	select {
	case code := <-done:
		assert.Equal(t, 0, code, "stderr:\n%s", &stderr)
	case <-time.After(5 * time.Second):
		t.Fatalf("run did not return within 5s of cancellation; stderr:\n%s", &stderr)
	}
	assert.Contains(t, stderr.String(), "geocoding: stopped")
	assert.NotContains(t, stderr.String(), "level=ERROR")
}

// With -key ip, IPv6 clients are grouped by the library's default prefix,
// a /64: a client that changes address within its /64 at every request
// gets no fresh bucket. -ipv6-prefix 128 keys every address on its own,
// and -ipv6-prefix 56 groups the /64s of one /56.
func TestIPv6Prefix(t *testing.T) {
	// admitted serves 1000 requests from as many addresses of
	// 2001:db8:1:200::/56, spread over the /64s 2001:db8:1:2xx::/64
	// when spread, or within 2001:db8:1:200::/64.
	admitted := func(t *testing.T, spread bool, args ...string) int {
		t.Helper()
		h, _ := newTestHandler(t, append([]string{"-key", "ip", "-rate", "1", "-burst", "5"}, args...)...)
		n := 0
		for i := range 1000 {
			a := [16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 2, 0, 14: byte(i >> 8), 15: byte(i)}
			if spread {
				a[7] = byte(i)
			}
			remote := netip.AddrPortFrom(netip.AddrFrom16(a), 443).String()
			if serve(h, request{target: "/geocode?q=rome", remoteAddr: remote}).Code == http.StatusOK {
				n++
			}
		}
		return n
	}
	assert.Equal(t, 5, admitted(t, false), "1000 addresses of one /64, by default")
	assert.Equal(t, 5, admitted(t, false, "-ipv6-prefix", "0"), "1000 addresses of one /64, -ipv6-prefix 0")
	assert.Equal(t, 1000, admitted(t, false, "-ipv6-prefix", "128"), "1000 addresses of one /64, -ipv6-prefix 128")
	assert.Equal(t, 1000, admitted(t, true), "1000 addresses in 256 /64s, at most 4 each, by default")
	assert.Equal(t, 5, admitted(t, true, "-ipv6-prefix", "56"), "1000 addresses of one /56, -ipv6-prefix 56")
}
