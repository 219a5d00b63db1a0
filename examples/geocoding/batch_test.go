package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// postBatch returns the request of a batch of body for apiKey.
func postBatch(apiKey, body string) request {
	return request{method: http.MethodPost, target: "/geocode/batch", apiKey: apiKey, body: body}
}

// remaining returns the RateLimit field of a GET /geocode of apiKey, which
// spends a token of its own.
func remaining(h http.Handler, apiKey string) string {
	return field(serve(h, request{target: "/geocode?q=paris", apiKey: apiKey}).Header(), "RateLimit")
}

// TestBatch: a batch reserves a token per name and keeps one per place
// found: of three names, one unknown, two tokens are spent.
func TestBatch(t *testing.T) {
	h, _ := newTestHandler(t, "-rate", "1", "-burst", "10")
	w := serve(h, postBatch("alice", "Paris\natlantis\n tokyo \n"))
	require.Equal(t, http.StatusOK, w.Code, "body %q", w.Body.String())
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
	assert.Equal(t, `[{"query":"Paris","name":"Paris","lat":48.8566,"lon":2.3522},{"query":" tokyo ","name":"Tokyo","lat":35.6762,"lon":139.6503}]`+"\n", w.Body.String())
	assert.Equal(t, `"default";r=7;t=1`, field(w.Header(), "RateLimit"), "three reserved")
	assert.Equal(t, `"default";r=7;t=1`, remaining(h, "alice"), "two spent, and one by this GET")

	w = serve(h, postBatch("alice", "atlantis\nmu\n"))
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "[]\n", w.Body.String())
	assert.Equal(t, `"default";r=5;t=1`, remaining(h, "alice"), "none found, one spent, and one by this GET")
}

// TestBatchNoneFound: a batch in which no place is found still costs one
// token. With a burst of 5 and the clock frozen, five batches of unknown
// names pass and the sixth is refused; a token later, one more passes.
func TestBatchNoneFound(t *testing.T) {
	const burst = 5
	h, clock := newTestHandler(t, "-rate", "1", "-burst", "5")
	unknown := postBatch("alice", "atlantis\n")
	for i := range burst {
		w := serve(h, unknown)
		require.Equal(t, http.StatusOK, w.Code, "batch %d: body %q", i+1, w.Body.String())
		assert.Equal(t, "[]\n", w.Body.String(), "batch %d", i+1)
	}
	w := serve(h, unknown)
	assert.Equal(t, http.StatusTooManyRequests, w.Code, "batch %d: the burst is spent", burst+1)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))

	clock.Advance(time.Second)
	assert.Equal(t, []int{200, 429}, statuses(h, postBatch("alice", "mu\n"), 2), "one token back, one batch")
	clock.Advance(2 * time.Second)
	assert.Equal(t, []int{200, 429}, statuses(h, postBatch("alice", "atlantis\nmu\n"), 2), "two names reserve two, and one is kept")
}

// TestBatchLines: blank lines are skipped and CRLF accepted.
func TestBatchLines(t *testing.T) {
	h, _ := newTestHandler(t, "-rate", "1", "-burst", "10")
	w := serve(h, postBatch("alice", "\r\nrome\r\n\r\n  \t\r\nnew york\r\nrome"))
	require.Equal(t, http.StatusOK, w.Code, "body %q", w.Body.String())
	var got []geocodeResult
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &got))
	queries := make([]string, len(got))
	for i, g := range got {
		queries[i] = g.Query
	}
	assert.Equal(t, []string{"rome", "new york", "rome"}, queries)
	assert.Equal(t, `"default";r=7;t=1`, field(w.Header(), "RateLimit"), "three names reserved")
}

// TestBatchTooLarge: more than 100 names, no name, or an oversized body
// are answered 400 before any token is taken; a batch above the burst can
// never pass (400), and one above the tokens left is refused with 429,
// spending nothing.
func TestBatchTooLarge(t *testing.T) {
	h, _ := newTestHandler(t, "-rate", "1", "-burst", "101")
	for _, tc := range []struct{ name, body, detail string }{
		{"101 names", strings.Repeat("paris\n", 101), "a batch holds at most 100 names; this one has more"},
		{"no name", "\n \r\n", "the body holds no place name; send one per line"},
		{"64 KiB", strings.Repeat("x", 64<<10+1), "the body is larger than 65536 bytes; a batch holds at most 100 names, one per line"},
	} {
		w := serve(h, postBatch("alice", tc.body))
		assert.Equal(t, http.StatusBadRequest, w.Code, tc.name)
		assert.Equal(t, tc.detail, decode(t, w)["detail"], tc.name)
		assert.Empty(t, field(w.Header(), "RateLimit"), tc.name)
	}
	assert.Equal(t, `"default";r=100;t=1`, remaining(h, "alice"), "nothing spent")
	require.Equal(t, http.StatusOK, serve(h, postBatch("alice", strings.Repeat("paris\n", 100))).Code, "100 names")

	h, _ = newTestHandler(t, "-rate", "1", "-burst", "10")
	w := serve(h, postBatch("bob", strings.Repeat("paris\n", 11)))
	assert.Equal(t, http.StatusBadRequest, w.Code, "11 names, burst 10")
	assert.Equal(t, "Request Cost Exceeds Capacity", decode(t, w)["title"])
	require.Equal(t, repeat(200, 5), statuses(h, request{target: "/geocode?q=paris", apiKey: "bob"}, 5))
	w = serve(h, postBatch("bob", strings.Repeat("paris\n", 6)))
	assert.Equal(t, http.StatusTooManyRequests, w.Code, "6 names, 5 tokens left")
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Equal(t, `"default";r=4;t=1`, remaining(h, "bob"), "nothing spent by the refused batch")
}

// TestBatchQuota: every policy of the key reserves a token per name, and
// gets back those of the names not found.
func TestBatchQuota(t *testing.T) {
	h, _ := newTestHandler(t, "-daily", "5")
	w := serve(h, postBatch("alice", "paris\natlantis\nmu\n"))
	require.Equal(t, http.StatusOK, w.Code)
	req := request{target: "/geocode?q=paris", apiKey: "alice"}
	assert.Equal(t, []int{200, 200, 200, 200, 429}, statuses(h, req, 5), "one of the day's five spent")
	w = serve(h, postBatch("alice", "paris\n"))
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, []any{"daily"}, decode(t, w)["violated-policies"])
}

// TestBatchMethods: only POST; GET /geocode is no batch.
func TestBatchMethods(t *testing.T) {
	h, _ := newTestHandler(t)
	for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodHead} {
		w := serve(h, request{method: method, target: "/geocode/batch", apiKey: "alice", body: "paris\n"})
		assert.Equal(t, http.StatusMethodNotAllowed, w.Code, method)
		assert.Equal(t, "POST", w.Header().Get("Allow"), method)
	}
	w := serve(h, request{method: http.MethodPost, target: "/geocode/batch", body: "paris\n"})
	assert.Equal(t, http.StatusUnauthorized, w.Code, "no key")
}
