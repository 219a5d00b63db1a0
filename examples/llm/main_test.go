package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit/storetest"
)

// newTestHandler is newHandler on a fake clock that moves only when told.
func newTestHandler(t *testing.T, rate, burst int64) (http.Handler, *storetest.Clock) {
	t.Helper()
	clock := new(storetest.Clock)
	h, err := newHandler(rate, burst, clock.Now)
	require.NoError(t, err)
	return h, clock
}

// ask posts prompt for the API key demo.
func ask(h http.Handler, prompt string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/complete", strings.NewReader(prompt))
	r.Header.Set("X-API-Key", "demo")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestSettleLess: a request reserves four tokens per token of its prompt,
// streams its answer, and keeps only the tokens it used.
func TestSettleLess(t *testing.T) {
	h, _ := newTestHandler(t, 5, 50)
	w := ask(h, "what is a token bucket")
	require.Equal(t, http.StatusOK, w.Code, "body %q", w.Body.String())
	assert.True(t, w.Flushed, "streamed")
	assert.Equal(t, `"tokens";r=30;t=1`, w.Header()["RateLimit"][0], "20 reserved")
	words := strings.Fields(strings.Split(w.Body.String(), "\n\n")[0])
	assert.Len(t, words, 10)
	assert.True(t, strings.HasSuffix(w.Body.String(), "\n\n[15 tokens: 5 of prompt, 10 of answer; 20 reserved]\n"), "body %q", w.Body.String())

	w = ask(h, "and now")
	assert.Equal(t, `"tokens";r=27;t=1`, w.Header()["RateLimit"][0], "15 spent, then 8 reserved")
}

// TestSettleMore: an answer longer than the estimate takes the rest past
// empty, and the next request waits until the debt is repaid and its own
// cost earned.
func TestSettleMore(t *testing.T) {
	h, clock := newTestHandler(t, 5, 50)
	require.Equal(t, http.StatusOK, ask(h, "what is a token bucket").Code)
	w := ask(h, "explain the leaky bucket")
	require.Equal(t, http.StatusOK, w.Code)
	assert.True(t, strings.HasSuffix(w.Body.String(), "[64 tokens: 4 of prompt, 60 of answer; 16 reserved]\n"), "body %q", w.Body.String())

	w = ask(h, "and now")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "8", w.Header().Get("Retry-After"), "29 tokens of debt and 8 to reserve, at 5 a second")
	clock.Advance(7400*time.Millisecond - time.Nanosecond)
	assert.Equal(t, http.StatusTooManyRequests, ask(h, "and now").Code, "just before")
	clock.Advance(time.Nanosecond)
	assert.Equal(t, http.StatusOK, ask(h, "and now").Code)
}

// TestDebtIsExact: a debt is charged in full, however long the answer: at
// 1 token a second and a burst of 20, after an answer of 61 tokens the
// next request, which reserves 4, waits 61 + 4 − 20 = 45 s.
func TestDebtIsExact(t *testing.T) {
	h, clock := newTestHandler(t, 1, 20)
	w := ask(h, "explain")
	require.Equal(t, http.StatusOK, w.Code)
	assert.True(t, strings.HasSuffix(w.Body.String(), "[61 tokens: 1 of prompt, 60 of answer; 4 reserved]\n"), "body %q", w.Body.String())
	w = ask(h, "hi")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "45", w.Header().Get("Retry-After"))
	clock.Advance(45*time.Second - 1)
	assert.Equal(t, http.StatusTooManyRequests, ask(h, "hi").Code)
	clock.Advance(1)
	assert.Equal(t, http.StatusOK, ask(h, "hi").Code)
}

// TestBadPrompts: an empty prompt, or one whose estimate is above the
// burst, is answered 400 and spends nothing.
func TestBadPrompts(t *testing.T) {
	h, _ := newTestHandler(t, 5, 50)
	assert.Equal(t, http.StatusBadRequest, ask(h, " \n").Code, "empty")
	assert.Equal(t, http.StatusBadRequest, ask(h, strings.Repeat("word ", 13)).Code, "52 tokens reserved, burst 50")
	w := ask(h, "hi")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"tokens";r=46;t=1`, w.Header()["RateLimit"][0], "nothing spent before")
}
