package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/tokenfair/ratelimit"
)

// adminResetPath is the admin endpoint that forgets a client's state.
const adminResetPath = "/admin/reset"

// admin serves the admin endpoint, with -admin-token, in front of the
// router, so that the limiter never sees it in any framework:
//
//	POST /admin/reset?key=KEY
//	Authorization: Bearer TOKEN
//
// forgets the client's state under every per-client policy (the Global
// one, -global-rate, is shared by every client and stays as it is) and
// answers 204. A wrong or missing token gets 401, a missing or malformed
// key 400, another method 405, and a store that fails 503. Failed tokens
// are limited per client address and in all (see adminGuard): past the
// limit, every admin request of the client gets 429 with Retry-After, and
// failures are logged once a minute, not once each. Every other path goes
// to next.
//
// KEY is what identifies the client to the server: with -key api-key, the
// client's API key, as it sends it in X-API-Key (the limiter knows it only
// by its hash); with -key ip, the client's IP address, as the server finds
// it (behind -trusted-proxies, the address from X-Forwarded-For), such as
// 203.0.113.7 or 2001:db8::1, or the limiter's key for it, ip:203.0.113.7.
type admin struct {
	next    http.Handler
	token   [sha256.Size]byte // the SHA-256 of the token
	limiter *ratelimit.Limiter
	key     func(r *http.Request, client string) (string, error) // the limiter's key of a client
	badKey  string                                               // the 400's detail when key fails
	logger  *slog.Logger
	guard   *adminGuard // limits and logs the failed tokens
}

// withAdmin returns next behind the admin endpoint when token is set, and
// next itself when it is not: then the endpoint does not exist. keyBy is
// the -key flag, key the limiter's KeyFunc, and guard limits and logs the
// failed tokens.
func withAdmin(next http.Handler, token string, limiter *ratelimit.Limiter, keyBy string, key ratelimit.KeyFunc, guard *adminGuard, logger *slog.Logger) (http.Handler, error) {
	if token == "" {
		return next, nil
	}
	if !isBearerToken(token) {
		return nil, errors.New("-admin-token: want the characters of a bearer token: letters, digits, - . _ ~ + / and = at the end")
	}
	a := &admin{next: next, token: sha256.Sum256([]byte(token)), limiter: limiter, logger: logger, guard: guard}
	switch keyBy {
	case "api-key":
		a.badKey = "the key is empty"
		a.key = func(r *http.Request, client string) (string, error) {
			return key(clientRequest(r.Context(), func(c *http.Request) { c.Header.Set(apiKeyHeader, client) }))
		}
	case "ip":
		a.badKey = "the key is not an IP address"
		a.key = func(r *http.Request, client string) (string, error) {
			client = strings.TrimPrefix(client, "ip:")
			return key(clientRequest(r.Context(), func(c *http.Request) { c.RemoteAddr = client }))
		}
	default:
		return nil, fmt.Errorf("-key %s: want api-key or ip", keyBy)
	}
	return a, nil
}

// clientRequest returns a request as a client would send it, made by set
// from an empty one with ctx: the key function finds the limiter's key in
// it as in the client's own requests (of a reset, or of a plan).
func clientRequest(ctx context.Context, set func(*http.Request)) *http.Request {
	c := (&http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/"}, Header: http.Header{}}).WithContext(ctx)
	set(c)
	return c
}

func (a *admin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != adminResetPath {
		a.next.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeProblem(w, http.StatusMethodNotAllowed, "only POST is allowed")
		return
	}
	from := a.guard.clientOf(r)
	if wait := a.guard.wait(r.Context(), from); wait > 0 {
		a.guard.log.failed(from, true)
		refuseAdmin(w, wait)
		return
	}
	if !a.authorized(r) {
		wait := a.guard.fail(r.Context(), from)
		a.guard.log.failed(from, wait > 0)
		if wait > 0 {
			refuseAdmin(w, wait)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="admin"`)
		writeProblem(w, http.StatusUnauthorized, "the request does not carry the admin token (Authorization: Bearer TOKEN)")
		return
	}
	client := r.URL.Query().Get("key")
	if client == "" {
		writeProblem(w, http.StatusBadRequest, "missing query parameter key")
		return
	}
	key, err := a.key(r, client)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, a.badKey)
		return
	}
	if err := a.limiter.Reset(r.Context(), key); err != nil {
		a.logger.Error("geocoding: admin reset failed", "key", key, "err", err)
		if errors.Is(err, ratelimit.ErrStore) {
			w.Header().Set("Retry-After", "1")
			writeProblem(w, http.StatusServiceUnavailable, "the store is unavailable; try again")
			return
		}
		writeProblem(w, http.StatusInternalServerError, "the client's state could not be reset")
		return
	}
	a.logger.Info("geocoding: admin reset", "key", key)
	w.WriteHeader(http.StatusNoContent)
}

// authorized reports whether r carries the admin token as a bearer token.
// It compares SHA-256 digests in constant time, so that neither the
// token's content nor its length shows in the time it takes.
func (a *admin) authorized(r *http.Request) bool {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	got := sha256.Sum256([]byte(strings.TrimLeft(token, " ")))
	match := subtle.ConstantTimeCompare(got[:], a.token[:]) == 1
	return strings.EqualFold(scheme, "Bearer") && match
}

// isBearerToken reports whether s is an RFC 6750 b64token: letters,
// digits, "-._~+/", then any "=".
func isBearerToken(s string) bool {
	s = strings.TrimRight(s, "=")
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~+/", c) >= 0) {
			return false
		}
	}
	return s != ""
}
