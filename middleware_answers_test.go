package ratelimit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

func TestDenyResponse(t *testing.T) {
	s := newHarness(t, setup{limit: ratelimit.Per(1, time.Minute)})
	require.Equal(t, 200, s.get("c").Code)
	w := s.get("c")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	h := w.Header()
	assert.Equal(t, "application/problem+json", h.Get("Content-Type"))
	assert.Equal(t, "no-store", h.Get("Cache-Control"))
	assert.Equal(t, "60", h.Get("Retry-After"))
	assert.Equal(t, `"default";r=0;t=60`, field(h, "RateLimit"))
	assert.Equal(t, strconv.Itoa(w.Body.Len()), h.Get("Content-Length"))
	var body map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body), "body %q", w.Body)
	assert.Equal(t, map[string]any{
		"type":              "https://iana.org/assignments/http-problem-types#quota-exceeded",
		"title":             "Quota Exceeded",
		"status":            429.0,
		"detail":            "Too many requests; retry after 60 s.",
		"violated-policies": []any{"default"},
	}, body)
}

func TestErrorAnswers(t *testing.T) {
	secret := errors.New("dial tcp 10.1.2.3:6379: password=hunter2")
	for _, tc := range []struct {
		name    string
		store   ratelimit.Store
		key     ratelimit.KeyFunc
		header  []string
		status  int
		retry   string
		problem string
	}{
		{name: "missing key", key: func(*http.Request) (string, error) { return "", ratelimit.ErrMissingKey }, status: 401, problem: "Missing Credentials"},
		{name: "key error", key: func(*http.Request) (string, error) { return "", secret }, status: 500, problem: "Internal Server Error"},
		{name: "empty key", key: func(*http.Request) (string, error) { return "", nil }, status: 401, problem: "Missing Credentials"},
		{name: "bad client IP", key: func(*http.Request) (string, error) { return "", ratelimit.ErrBadRequest }, status: 400, problem: "Bad Request"},
		{name: "panicking key", key: func(*http.Request) (string, error) { panic("hunter2") }, status: 500, problem: "Internal Server Error"},
		{name: "cost error", header: []string{"X-Cost", "lots"}, status: 400, problem: "Bad Request"},
		{name: "negative cost", header: []string{"X-Cost", "-1"}, status: 400, problem: "Bad Request"},
		{name: "cost above burst", header: []string{"X-Cost", "11"}, status: 400, problem: "Request Cost Exceeds Capacity"},
		{name: "store down", store: failingStore{secret}, status: 503, retry: "1", problem: "Temporary Reduced Capacity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newHarness(t, setup{limit: ratelimit.PerSecond(5).WithBurst(10), store: tc.store, key: tc.key, opts: &ratelimit.MiddlewareOptions{Cost: costByHeader}})
			w := s.get("c", tc.header...)
			assert.Equal(t, tc.status, w.Code)
			assert.Zero(t, s.calls.Load(), "the handler is not called")
			assert.Equal(t, tc.retry, w.Header().Get("Retry-After"))
			assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
			var body struct{ Title string }
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
			assert.Equal(t, tc.problem, body.Title)
			assert.NotContains(t, w.Body.String(), "hunter2", "never the error's text")
			assert.Empty(t, field(w.Header(), "RateLimit"), "no rate-limit fields without a decision")
		})
	}
}

func TestCustomHandlers(t *testing.T) {
	var gotErr error
	s := newHarness(t, setup{limit: ratelimit.Per(1, time.Minute), opts: &ratelimit.MiddlewareOptions{
		Cost: costByHeader,
		OnDeny: func(w http.ResponseWriter, r *http.Request, res ratelimit.Result) {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("slow down, " + res.Policy.Name + " " + res.Policy.Limit.String()))
		},
		OnError: func(w http.ResponseWriter, r *http.Request, err error) {
			gotErr = err
			w.WriteHeader(http.StatusTeapot)
		},
	}})
	require.Equal(t, 200, s.get("c").Code)
	w := s.get("c")
	assert.Equal(t, 503, w.Code)
	assert.Equal(t, "slow down, default 1/min", w.Body.String())
	assert.Equal(t, "60", w.Header().Get("Retry-After"), "set before the deny handler runs")
	assert.Equal(t, http.StatusTeapot, s.get("c", "X-Cost", "2").Code)
	assert.ErrorIs(t, gotErr, ratelimit.ErrBadRequest)
	assert.ErrorContains(t, gotErr, `cost 2, policy "default" has burst 1`)
}

// lineLogger returns a logger at level into buf, for counting lines.
func lineLogger(buf *bytes.Buffer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level}))
}

// Every answer that is not a 429 explains itself in its problem detail,
// without the request's header values, key or secrets, in the body or in
// the first line logged; the first line logs the same detail.
func TestProblemDetails(t *testing.T) {
	const secret = "sk_live_0123456789abcdef"
	ip, err := ratelimit.KeyByIP(&ratelimit.IPOptions{TrustedProxies: []string{"192.0.2.0/24"}})
	require.NoError(t, err)
	storeErr := errors.New("dial tcp 10.1.2.3:6379: password=" + secret)
	for _, tc := range []struct {
		name      string
		key       ratelimit.KeyFunc
		store     ratelimit.Store
		prepare   func(r *http.Request) *http.Request
		status    int
		title     string
		detail    string
		challenge string
		// debugQuotes: the debug lines quote the value at fault (a
		// forwarding entry, a cost function's error), which is no secret.
		debugQuotes bool
	}{
		{name: "no API key", key: ratelimit.KeyByAPIKey("X-API-Key"),
			status: 401, title: "Missing Credentials", detail: "the request carries no X-API-Key header", challenge: `ApiKey in="header", name="X-API-Key"`},
		{name: "empty API key", key: ratelimit.KeyByAPIKey("X-API-Key"), prepare: header("X-API-Key", " "),
			status: 401, title: "Missing Credentials", detail: "the request's X-API-Key header is empty", challenge: `ApiKey in="header", name="X-API-Key"`},
		{name: "no user", key: ratelimit.KeyByContextValue(ctxUser{}), prepare: header("Authorization", "Bearer "+secret),
			status: 401, title: "Missing Credentials", detail: "the request carries no user ID in its context", challenge: "Bearer"},
		{name: "user of a wrong type", key: ratelimit.KeyByContextValue(ctxUser{}), prepare: userValue(map[string]int{secret: 1}),
			status: 500, title: "Internal Server Error", detail: "the rate limit could not be checked"}, // see TestKeyByContextValueUnusableTypeIs500
		{name: "empty key", key: func(*http.Request) (string, error) { return "", nil }, prepare: header("X-API-Key", secret),
			status: 401, title: "Missing Credentials", detail: "the key function returned an empty key", challenge: "Bearer"},
		{name: "bare ErrMissingKey", key: func(*http.Request) (string, error) { return "", ratelimit.ErrMissingKey },
			status: 401, title: "Missing Credentials", detail: "the request carries no credentials by which to limit it", challenge: "Bearer"},
		{name: "bad X-Forwarded-For entry", key: ip, prepare: header("X-Forwarded-For", secret), debugQuotes: true,
			status: 400, title: "Bad Request", detail: "the trusted proxy sent an X-Forwarded-For entry that is not an IP address"},
		{name: "bare ErrBadRequest", key: func(*http.Request) (string, error) { return "", ratelimit.ErrBadRequest },
			status: 400, title: "Bad Request", detail: "the request cannot be rate-limited as it is"},
		{name: "cost function failed", prepare: header("X-Cost", secret), debugQuotes: true,
			status: 400, title: "Bad Request", detail: "the cost function failed"},
		{name: "negative cost", prepare: header("X-Cost", "-3"),
			status: 400, title: "Bad Request", detail: "the request's cost, -3, is negative"},
		{name: "cost above burst", prepare: header("X-Cost", "12"),
			status: 400, title: "Request Cost Exceeds Capacity", detail: `the request's cost, 12, is above the burst of policy "api", 10`},
		{name: "store down", store: failingStore{storeErr},
			status: 503, title: "Temporary Reduced Capacity", detail: "the rate limit cannot be checked for now; retry after 1 s"},
		{name: "key function error", key: func(*http.Request) (string, error) { return "", storeErr },
			status: 500, title: "Internal Server Error", detail: "the rate limit could not be checked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			h := newHarness(t, setup{
				policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(5).WithBurst(10)}},
				store:    tc.store,
				key:      tc.key,
				opts:     &ratelimit.MiddlewareOptions{Cost: costByHeader, Logger: lineLogger(&logs, slog.LevelDebug)},
				next:     func(http.ResponseWriter, *http.Request) { t.Error("the handler runs") },
			})
			for i := range 2 {
				r := httptest.NewRequest(http.MethodGet, "/geocode?q=paris", nil)
				r.RemoteAddr = "192.0.2.1:1234"
				r.Header.Set("X-Client", "c")
				if tc.prepare != nil {
					r = tc.prepare(r)
				}
				w := serve(h, r)
				assert.Equal(t, tc.status, w.Code)
				assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
				var body struct{ Title, Detail string }
				require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body), w.Body.String())
				assert.Equal(t, tc.title, body.Title)
				assert.Equal(t, tc.detail, body.Detail)
				assert.Equal(t, tc.challenge, w.Header().Get("WWW-Authenticate"))
				assert.NotContains(t, w.Body.String(), secret, "request %d: the body", i)
				assert.NotContains(t, fmt.Sprint(w.Header()), secret, "request %d: the header fields", i)
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if tc.status < 500 {
				require.Len(t, lines, 2, logs.String())
				assert.Contains(t, lines[0], "level=WARN", "the first refusal")
				assert.Contains(t, lines[0], fmt.Sprintf("detail=%q", tc.detail))
				assert.Contains(t, lines[0], "method=GET path=/geocode")
				assert.NotContains(t, lines[0], secret, "the first line logs the detail, not the value")
				assert.Contains(t, lines[1], "level=DEBUG", "the second")
			}
			if !tc.debugQuotes && tc.status != 503 && tc.status != 500 {
				assert.NotContains(t, logs.String(), secret, "no line quotes the secret")
			}
		})
	}
}

// The cost-above-burst body on the wire, with its escaped quotes; and a
// detail with HTML characters is escaped as encoding/json escapes it.
func TestProblemBodyBytes(t *testing.T) {
	h := newHarness(t, setup{
		policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(5).WithBurst(10)}},
		key:      ratelimit.KeyByContextValue(ctxUser{}),
		opts:     &ratelimit.MiddlewareOptions{Cost: costByHeader, Logger: discardLogger()},
	})
	r := userValue("alice")(httptest.NewRequest(http.MethodGet, "/", nil))
	r.Header.Set("X-Cost", "12")
	w := serve(h, r)
	assert.Equal(t, `{"type":"about:blank","title":"Request Cost Exceeds Capacity","status":400,"detail":"the request's cost, 12, is above the burst of policy \"api\", 10"}`+"\n", w.Body.String())
	assert.Equal(t, strconv.Itoa(w.Body.Len()), w.Header().Get("Content-Length"))

	// A header name may hold '&', which encoding/json escapes.
	h = newHarness(t, setup{limiter: h.lim, key: ratelimit.KeyByAPIKey("X-Key-&-Secret"), opts: &ratelimit.MiddlewareOptions{Logger: discardLogger()}})
	w = serve(h, httptest.NewRequest(http.MethodGet, "/", nil))
	detail := "the request carries no X-Key-&-Secret header"
	want, err := json.Marshal(detail)
	require.NoError(t, err)
	assert.Contains(t, w.Body.String(), `"detail":`+string(want)+"}\n", "escaped as encoding/json does")
	assert.Contains(t, w.Body.String(), `X-Key-\u0026-Secret`)
}

// A 401 carries the WWW-Authenticate challenge that RFC 9110 requires:
// the key function's by default, MiddlewareOptions.Challenge when set; other
// answers carry none.
func TestWWWAuthenticate(t *testing.T) {
	get := func(key ratelimit.KeyFunc, opts *ratelimit.MiddlewareOptions, prepare ...func(*http.Request) *http.Request) *httptest.ResponseRecorder {
		t.Helper()
		if opts == nil {
			opts = new(ratelimit.MiddlewareOptions)
		}
		opts.Logger = discardLogger()
		h := newHarness(t, setup{limit: ratelimit.PerSecond(5), key: key, opts: opts})
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		for _, p := range prepare {
			r = p(r)
		}
		return serve(h, r)
	}
	w := get(ratelimit.KeyByAPIKey("X-API-Key"), nil)
	assert.Equal(t, 401, w.Code)
	assert.Equal(t, []string{`ApiKey in="header", name="X-API-Key"`}, w.Header()["Www-Authenticate"])
	assert.Equal(t, "Bearer", get(ratelimit.KeyByAPIKey("Authorization"), nil).Header().Get("WWW-Authenticate"))
	assert.Equal(t, "Bearer", get(ratelimit.KeyByContextValue(ctxUser{}), nil).Header().Get("WWW-Authenticate"))

	configured := &ratelimit.MiddlewareOptions{Challenge: `Bearer realm="geocoding"`}
	w = get(ratelimit.KeyByAPIKey("X-API-Key"), configured)
	assert.Equal(t, 401, w.Code)
	assert.Equal(t, `Bearer realm="geocoding"`, w.Header().Get("WWW-Authenticate"))

	w = get(ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{Challenge: "Bearer", Cost: costByHeader}, header("X-API-Key", "k"), header("X-Cost", "-1"))
	assert.Equal(t, 400, w.Code)
	assert.Empty(t, w.Header().Values("WWW-Authenticate"), "only a 401 challenges")

	lim := newHarness(t, setup{limit: ratelimit.PerSecond(5)}).lim
	for _, bad := range []string{"Bearer\r\nSet-Cookie: a=b", " Bearer", "Bearer\x00"} {
		_, err := ratelimit.NewMiddleware(lim, keyByHeader, &ratelimit.MiddlewareOptions{Challenge: bad})
		assert.ErrorContains(t, err, "MiddlewareOptions.Challenge", "%q", bad)
	}
}

// The first refusal of each kind is logged at the warning level, once per
// Middleware, whatever its OnError; the others only at the debug level.
func TestFirstRefusalLoggedOnce(t *testing.T) {
	for _, custom := range []bool{false, true} {
		var logs bytes.Buffer
		opts := &ratelimit.MiddlewareOptions{Cost: costByHeader, Logger: lineLogger(&logs, slog.LevelInfo)}
		if custom {
			opts.OnError = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusTeapot) }
		}
		h := newHarness(t, setup{
			policies: []ratelimit.Policy{{Name: "api", Limit: ratelimit.PerSecond(5).WithBurst(10)}},
			key:      ratelimit.KeyByAPIKey("X-API-Key"),
			opts:     opts,
		})
		send := func(n int, prepare ...func(*http.Request) *http.Request) {
			for range n {
				r := httptest.NewRequest(http.MethodPost, "/v1/geocode", nil)
				for _, p := range prepare {
					r = p(r)
				}
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
		}
		send(100)
		assert.Equal(t, 1, strings.Count(logs.String(), "refusal=missing-key"), "custom OnError %v: %s", custom, logs.String())
		assert.Equal(t, 1, strings.Count(logs.String(), "level=WARN"), logs.String())
		assert.Contains(t, logs.String(), `detail="the request carries no X-API-Key header" method=POST path=/v1/geocode`)
		send(100, header("X-API-Key", "k"), header("X-Cost", "lots"))
		send(100, header("X-API-Key", "k"), header("X-Cost", "-1"))
		send(100, header("X-API-Key", "k"), header("X-Cost", "11"))
		assert.Equal(t, 1, strings.Count(logs.String(), "refusal=cost "), "the cost function and a negative cost are one kind: %s", logs.String())
		assert.Equal(t, 1, strings.Count(logs.String(), "refusal=cost-above-burst"), logs.String())
		assert.Equal(t, 3, strings.Count(logs.String(), "\n"), "one line per kind over 400 refusals: %s", logs.String())
	}

	// Each Middleware logs its own first refusals; at the debug level,
	// one warning and 99 debug lines.
	var logs bytes.Buffer
	var lim *ratelimit.Limiter // one limiter, two Middlewares
	for range 2 {
		h := newHarness(t, setup{limit: ratelimit.PerSecond(5), limiter: lim, key: ratelimit.KeyByAPIKey("X-API-Key"), opts: &ratelimit.MiddlewareOptions{Logger: lineLogger(&logs, slog.LevelDebug)}})
		lim = h.lim
		for range 100 {
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
		}
	}
	assert.Equal(t, 2, strings.Count(logs.String(), "level=WARN"), logs.String())
	assert.Equal(t, 198, strings.Count(logs.String(), "level=DEBUG"))
}
