package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit/storetest"
)

var frameworks = []string{"nethttp", "gin", "echo"}

// answer is a response as the client sees it on the wire.
type answer struct {
	Status int
	Header http.Header // without Date
	Body   string
}

// newTestServer serves the handler built from args on a loopback port.
func newTestServer(t *testing.T, args ...string) (*httptest.Server, *storetest.Clock) {
	t.Helper()
	h, clock := newTestHandler(t, args...)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, clock
}

// fetch sends req to srv over HTTP. req.remoteAddr cannot be chosen: the
// peer is 127.0.0.1.
func fetch(t *testing.T, srv *httptest.Server, req request) answer {
	t.Helper()
	method := req.method
	if method == "" {
		method = http.MethodGet
	}
	r, err := http.NewRequest(method, srv.URL+req.target, strings.NewReader(req.body))
	require.NoError(t, err)
	if req.apiKey != "" {
		r.Header.Set("X-API-Key", req.apiKey)
	}
	if req.forwardedFor != "" {
		r.Header.Set("X-Forwarded-For", req.forwardedFor)
	}
	resp, err := srv.Client().Do(r)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Header.Del("Date")
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}
}

// TestFrameworksAnswerAlike sends the same requests to a server of each
// framework and requires the very answers of the net/http server: status,
// every header field but Date, and body.
func TestFrameworksAnswerAlike(t *testing.T) {
	alice := request{target: "/geocode?q=paris", apiKey: "alice"}
	var script []request
	for range 12 {
		script = append(script, alice)
	}
	script = append(script,
		request{target: "/geocode?q=paris&pretty", apiKey: "alice"}, // Echo's error handler would indent
		request{target: "/geocode?q=atlantis", apiKey: "bob"},
		request{target: "/geocode", apiKey: "bob"},
		request{target: "/geocode?q=%20", apiKey: "bob"},
		request{method: http.MethodPost, target: "/geocode?q=paris", apiKey: "bob"},
		request{method: http.MethodDelete, target: "/geocode", apiKey: "bob"},
		request{method: http.MethodOptions, target: "/geocode", apiKey: "bob"},
		request{method: "PURGE", target: "/geocode", apiKey: "bob"},
		request{method: http.MethodHead, target: "/geocode?q=london", apiKey: "bob"},
		request{method: http.MethodHead, target: "/geocode?q=london", apiKey: "alice"},
		request{target: "/nowhere", apiKey: "bob"},
		request{target: "/geocode/", apiKey: "bob"},
		request{target: "/geocode?q=paris"},
		request{target: "/geocode?q=paris", apiKey: "   "},
		request{target: "/healthz"},
		request{method: http.MethodHead, target: "/healthz"},
		request{method: http.MethodPost, target: "/healthz"},
		request{method: http.MethodPost, target: "/metrics", apiKey: "carol"},
		request{method: http.MethodPost, target: "/metrics"},
		request{target: "/geocode?q=tokyo", apiKey: "bob"},
		postBatch("bob", "paris\r\natlantis\r\n\r\ntokyo"),
		postBatch("bob", strings.Repeat("paris\n", 101)),
		postBatch("bob", strings.Repeat("paris\n", 11)),
		postBatch("", "paris\n"),
		request{target: "/geocode/batch", apiKey: "bob"},
		request{method: http.MethodOptions, target: "/geocode/batch", apiKey: "bob"},
		postBatch("bob", "rome\n"),
	)
	xff := func(client string) request {
		return request{target: "/geocode?q=rome", forwardedFor: client}
	}
	ipScript := []request{
		xff("203.0.113.7"), xff("203.0.113.7"), xff("203.0.113.7"), xff("192.0.2.1, 203.0.113.7"),
		xff("198.51.100.8"), xff("::ffff:198.51.100.8"), xff("garbage"), xff(""),
	}
	plans := plansFile(t, `{"alice": {"burst": 5, "daily": 8}, "bob": {"daily": 0}}`)
	for _, tc := range []struct {
		name   string
		args   []string
		script []request
	}{
		{"defaults", nil, script},
		{"quotas and plans", []string{"-daily", "3", "-monthly", "100", "-tz", "Europe/Paris", "-plans", plans}, script},
		{"legacy headers", []string{"-headers", "legacy", "-rate", "1", "-burst", "3"}, script},
		{"x headers", []string{"-headers", "x"}, script},
		{"no headers", []string{"-headers", "none"}, script},
		{"leaky-shape", []string{"-algorithm", "leaky-shape", "-rate", "1000", "-burst", "5"}, script},
		{"ip behind a proxy", []string{"-key", "ip", "-trusted-proxies", "127.0.0.0/8", "-rate", "1", "-burst", "2"}, ipScript},
		{"count failed", []string{"-count", "failed", "-rate", "1", "-burst", "2"}, script},
		{"daily bytes", []string{"-daily-bytes", "500", "-tz", "Europe/Paris"}, script}, // alice and bob cross it
		{"skip path", []string{"-skip-path", "/geocode", "-rate", "1", "-burst", "2"}, script},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []answer
			for _, fw := range frameworks {
				srv, _ := newTestServer(t, append([]string{"-framework", fw}, tc.args...)...)
				var got []answer
				for _, req := range tc.script {
					got = append(got, fetch(t, srv, req))
				}
				metrics := fetch(t, srv, request{target: "/metrics"})
				assert.Equal(t, http.StatusOK, metrics.Status, "%s: GET /metrics", fw)
				if want == nil {
					want = got
					continue
				}
				for i := range want {
					assert.Equal(t, want[i], got[i], "-framework %s: %s %s (X-API-Key %q, X-Forwarded-For %q)",
						fw, tc.script[i].method, tc.script[i].target, tc.script[i].apiKey, tc.script[i].forwardedFor)
				}
			}
		})
	}
}

// TestFrameworksWorkedExample runs the worked example of the design with
// each framework: 5 tokens per second, burst 10, twelve requests at once,
// then one second later.
func TestFrameworksWorkedExample(t *testing.T) {
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			srv, clock := newTestServer(t, "-framework", fw, "-rate", "5", "-burst", "10")
			req := request{target: "/geocode?q=paris", apiKey: "alice"}
			var answers []answer
			for range 12 {
				answers = append(answers, fetch(t, srv, req))
			}
			codes := make([]int, len(answers))
			for i, a := range answers {
				codes[i] = a.Status
			}
			require.Equal(t, append(repeat(200, 10), 429, 429), codes)
			first := answers[0]
			assert.Equal(t, `"default";q=10;w=2`, first.Header.Get("RateLimit-Policy"))
			assert.Equal(t, `"default";r=9;t=1`, first.Header.Get("RateLimit"))
			assert.Equal(t, "application/json", first.Header.Get("Content-Type"))
			assert.Equal(t, `{"query":"paris","name":"Paris","lat":48.8566,"lon":2.3522}`+"\n", first.Body)
			assert.Empty(t, first.Header.Get("Retry-After"))
			for _, a := range answers[10:] {
				assert.Equal(t, "1", a.Header.Get("Retry-After"))
				assert.Equal(t, "application/problem+json", a.Header.Get("Content-Type"))
				assert.Equal(t, "no-store", a.Header.Get("Cache-Control"))
				assert.Equal(t, `"default";r=0;t=1`, a.Header.Get("RateLimit"))
				assert.Equal(t, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"Too many requests; retry after 1 s.","violated-policies":["default"]}`+"\n", a.Body)
			}
			clock.Advance(time.Second)
			var later []int
			for range 6 {
				later = append(later, fetch(t, srv, req).Status)
			}
			assert.Equal(t, append(repeat(200, 5), 429), later, "one second later")
			assert.Equal(t, http.StatusUnauthorized, fetch(t, srv, request{target: "/geocode?q=paris"}).Status)
		})
	}
}

// TestFrameworksHeaderFormats checks each -headers value with each
// framework.
func TestFrameworksHeaderFormats(t *testing.T) {
	all := []string{
		"RateLimit-Policy", "RateLimit",
		"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset",
		"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
	}
	for _, tc := range []struct {
		format         string
		first, refused map[string]string
	}{
		{"ietf", map[string]string{"RateLimit-Policy": `"default";q=2;w=2`, "RateLimit": `"default";r=1;t=1`},
			map[string]string{"RateLimit-Policy": `"default";q=2;w=2`, "RateLimit": `"default";r=0;t=1`}},
		{"legacy", map[string]string{"RateLimit-Limit": "2", "RateLimit-Remaining": "1", "RateLimit-Reset": "1"},
			map[string]string{"RateLimit-Limit": "2", "RateLimit-Remaining": "0", "RateLimit-Reset": "2"}},
		{"x", map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "1"},
			map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "2"}},
		{"none", map[string]string{}, map[string]string{}},
	} {
		for _, fw := range frameworks {
			t.Run(tc.format+"/"+fw, func(t *testing.T) {
				srv, _ := newTestServer(t, "-framework", fw, "-headers", tc.format, "-rate", "1", "-burst", "2")
				req := request{target: "/geocode?q=berlin", apiKey: "demo"}
				fields := func(a answer) map[string]string {
					m := map[string]string{}
					for _, name := range all {
						if v := a.Header.Get(name); v != "" {
							m[name] = v
						}
					}
					return m
				}
				first := fetch(t, srv, req)
				assert.Equal(t, http.StatusOK, first.Status)
				assert.Equal(t, tc.first, fields(first))
				assert.Empty(t, first.Header.Get("Retry-After"))
				fetch(t, srv, req)
				refused := fetch(t, srv, req)
				assert.Equal(t, http.StatusTooManyRequests, refused.Status)
				assert.Equal(t, tc.refused, fields(refused))
				assert.Equal(t, "1", refused.Header.Get("Retry-After"))
			})
		}
	}
}
