package ratelimit_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

type userKey struct{}

// A user ID of a type that cannot be a key is the server's
// misconfiguration: every request gets 500, not a 401 that blames the
// client, and the error, which names the type, is logged once, at the
// error level; the later ones at the debug level. The same through a
// custom OnError, which gets an error that it cannot take for the
// client's.
func TestKeyByContextValueUnusableTypeIs500(t *testing.T) {
	for _, custom := range []bool{false, true} {
		var logs bytes.Buffer
		opts := &ratelimit.MiddlewareOptions{Logger: lineLogger(&logs, slog.LevelDebug)}
		var errs []error
		if custom {
			opts.OnError = func(w http.ResponseWriter, r *http.Request, err error) {
				errs = append(errs, err)
				switch {
				case errors.Is(err, ratelimit.ErrMissingKey):
					w.WriteHeader(http.StatusUnauthorized)
				case errors.Is(err, ratelimit.ErrBadRequest):
					w.WriteHeader(http.StatusBadRequest)
				default:
					w.WriteHeader(http.StatusInternalServerError)
				}
			}
		}
		h := newHarness(t, setup{limit: ratelimit.PerSecond(5).WithBurst(10), key: ratelimit.KeyByContextValue(userKey{}), opts: opts,
			next: func(http.ResponseWriter, *http.Request) { t.Error("the handler runs") }})
		for range 3 {
			r := httptest.NewRequest(http.MethodGet, "/v1/geocode", nil)
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, map[string]int{"alice": 1}))
			w := serve(h, r)
			assert.Equal(t, http.StatusInternalServerError, w.Code, "custom OnError %v: %s", custom, w.Body)
			if !custom {
				assert.Empty(t, w.Header().Get("WWW-Authenticate"), "a 500 challenges nobody")
				assert.Contains(t, w.Body.String(), `"detail":"the rate limit could not be checked"`)
				assert.NotContains(t, w.Body.String(), "map[string]int", "the client learns nothing of the server's types")
			}
		}
		for _, err := range errs {
			assert.NotErrorIs(t, err, ratelimit.ErrMissingKey)
			assert.NotErrorIs(t, err, ratelimit.ErrBadRequest)
		}
		out := logs.String()
		if custom {
			assert.Len(t, errs, 3)
			// The Middleware logs the first; the handler answers.
			assert.Equal(t, 1, strings.Count(out, "level=ERROR"), out)
			assert.Equal(t, 1, strings.Count(out, "\n"), out)
		} else {
			assert.Equal(t, 1, strings.Count(out, "level=ERROR"), out)
			assert.Equal(t, 2, strings.Count(out, "level=DEBUG"), out)
		}
		assert.Contains(t, out, "is a map[string]int, not a string, integer, fmt.Stringer or [16]byte", out)
		assert.NotContains(t, out, "alice", "the value is never logged")
	}
}

// A context key of the wrong type finds nothing: the 401's first log line
// names the key and its type, which is what the developer must fix.
func TestKeyByContextValueWrongKeyLogged(t *testing.T) {
	var logs bytes.Buffer
	h := newHarness(t, setup{limit: ratelimit.PerSecond(5), key: ratelimit.KeyByContextValue("user"),
		opts: &ratelimit.MiddlewareOptions{Logger: lineLogger(&logs, slog.LevelInfo)},
		next: func(http.ResponseWriter, *http.Request) { t.Error("the handler runs") }})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r = r.WithContext(context.WithValue(r.Context(), userKey{}, "alice"))
	assert.Equal(t, http.StatusUnauthorized, serve(h, r).Code)
	assert.Contains(t, logs.String(), `KeyByContextValue(\"user\")`, logs.String())
	assert.NotContains(t, logs.String(), "alice")
}

// One credential is one client however its scheme is spelled: the four
// spellings of one bearer token share one bucket of 2.
func TestKeyByAPIKeyAuthorizationOneBucket(t *testing.T) {
	h := newHarness(t, setup{limit: ratelimit.Per(2, time.Minute), key: ratelimit.KeyByAPIKey("Authorization")})
	var codes []int
	for _, v := range []string{"Bearer t0k3n", "bearer t0k3n", "BEARER t0k3n", "Bearer  t0k3n"} {
		codes = append(codes, h.get("", "Authorization", v).Code)
	}
	assert.Equal(t, []int{200, 200, 429, 429}, codes)
}

// KeyOfAPIKey gives the key KeyByAPIKey finds in a request, for each
// header and spelling it accepts, and another for another API key.
func TestKeyOfAPIKey(t *testing.T) {
	for _, tc := range []struct{ header, sent, given string }{
		{"X-API-Key", "secret-1", "secret-1"},
		{"x-api-key", " secret-1 ", "secret-1"},
		{"Authorization", "BEARER  tok", "Bearer tok"},
		{"authorization", "Bearer tok", "bearer tok"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set(tc.header, tc.sent)
		key, err := ratelimit.KeyByAPIKey(tc.header)(r)
		require.NoError(t, err)
		assert.Equal(t, key, ratelimit.KeyOfAPIKey(tc.header, tc.given), "KeyOfAPIKey(%q, %q)", tc.header, tc.given)
		assert.NotEqual(t, key, ratelimit.KeyOfAPIKey(tc.header, tc.given+"x"))
	}
}
