package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/storetest"
)

// newTestAPI returns the endpoint of m with its three meters, on a fake
// clock that stays at midnight UTC, and its limiter, for looks.
func newTestAPI(t *testing.T, rpm, itpm, otpd int64, m *model) (http.Handler, *ratelimit.Limiter) {
	t.Helper()
	clock := new(storetest.Clock)
	l, err := newLimiter(rpm, itpm, otpd, clock.Now)
	require.NoError(t, err)
	h, err := newHandler(l, clock.Now, m)
	require.NoError(t, err)
	return h, l
}

// post returns the request of body for the API key demo.
func post(body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body))
	r.Header.Set("X-API-Key", "demo")
	return r
}

// ask posts body for the API key demo.
func ask(h http.Handler, body string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, post(body))
	return w
}

// meters is what a key has left of each meter.
type meters struct{ requests, input, output int64 }

// left returns what the API key demo has left of each meter, by a look
// that spends nothing.
func left(t *testing.T, l *ratelimit.Limiter) meters {
	t.Helper()
	res, err := l.Take(context.Background(), ratelimit.KeyOfAPIKey("X-API-Key", "demo"), 0)
	require.NoError(t, err)
	require.Len(t, res.Results, 3)
	var m meters
	for _, r := range res.Results {
		switch r.Policy.Name {
		case "rpm":
			m.requests = r.Remaining
		case "itpm":
			m.input = r.Remaining
		case "otpd":
			m.output = r.Remaining
		}
	}
	return m
}

// answerOf returns the words of the answer in body, without the usage.
func answerOf(body string) []string {
	answer, _, _ := strings.Cut(body, "\n\n")
	return strings.Fields(answer)
}

// TestThreeMeters: a request reserves 1 request, its prompt's tokens and
// its max_tokens output tokens, and once its answer ends it keeps the
// output tokens written; its input tokens need no settlement.
func TestThreeMeters(t *testing.T) {
	var during []meters
	m := &model{}
	h, l := newTestAPI(t, 60, 1000, 2000, m)
	m.pace = func(context.Context) error {
		during = append(during, left(t, l)) // ServeHTTP runs on this goroutine
		return nil
	}
	w := ask(h, `{"prompt": "what is a token bucket", "max_tokens": 100}`)
	require.Equal(t, http.StatusOK, w.Code, "body %q", w.Body.String())
	assert.True(t, w.Flushed, "streamed")
	assert.Equal(t, `"rpm";q=60;w=60,"itpm";q=1000;qu="input-tokens";w=60,"otpd";q=2000;qu="output-tokens";w=86400`,
		w.Header()["RateLimit-Policy"][0])
	assert.Equal(t, `"otpd";r=1900;t=86400`, w.Header()["RateLimit"][0], "the binding meter, until midnight")
	require.Len(t, during, 10, "a pace before each word")
	assert.Equal(t, meters{59, 995, 1900}, during[0], "reserved: 1 request, 5 input tokens, 100 output tokens")
	assert.Equal(t, meters{59, 995, 1900}, during[9], "nothing settled before the answer ends")
	assert.Len(t, answerOf(w.Body.String()), 10)
	assert.True(t, strings.HasSuffix(w.Body.String(), "\n\n[input tokens: 5, output tokens: 10 of 100]\n"), "body %q", w.Body.String())
	assert.Equal(t, meters{59, 995, 1990}, left(t, l), "90 output tokens given back")
}

// askStep is a request and what it should get: the status, the words of
// the answer, the RateLimit field, and what the key has left after.
type askStep struct {
	body      string
	code      int
	words     int
	rateLimit string // "": none
	left      meters
}

// checkAsk asks s.body of h, limited by l, and checks what s says.
func checkAsk(t *testing.T, h http.Handler, l *ratelimit.Limiter, s askStep) {
	t.Helper()
	w := ask(h, s.body)
	if w.Code != s.code {
		t.Fatalf("ask(%s) = %d %q, want %d", s.body, w.Code, w.Body.String(), s.code)
	}
	if s.code == http.StatusOK {
		assert.Len(t, answerOf(w.Body.String()), s.words, "ask(%s): words", s.body)
	}
	if s.rateLimit != "" {
		assert.Equal(t, s.rateLimit, w.Header()["RateLimit"][0], "ask(%s): RateLimit", s.body)
	}
	assert.Equal(t, s.left, left(t, l), "ask(%s): left after", s.body)
}

// TestMaxTokens: an answer is cut at max_tokens, 256 when the request has
// none or 0, and each settles at the words it wrote.
func TestMaxTokens(t *testing.T) {
	h, l := newTestAPI(t, 60, 1000, 2000, &model{})
	for _, s := range []askStep{
		{`{"prompt": "explain the leaky bucket", "max_tokens": 20}`, 200, 20, `"rpm";r=59;t=1`, meters{59, 996, 1980}},
		{`{"prompt": "explain the leaky bucket"}`, 200, 60, `"otpd";r=1724;t=86400`, meters{58, 992, 1920}},
		{`{"prompt": "hi", "max_tokens": 0}`, 200, 2, `"otpd";r=1664;t=86400`, meters{57, 991, 1918}},
		{`{"prompt": "hi", "max_tokens": 1}`, 200, 1, `"rpm";r=56;t=1`, meters{56, 990, 1917}},
	} {
		checkAsk(t, h, l, s)
	}
}

// TestRefusals: a request that one meter refuses, or that no meter could
// ever hold, spends nothing of any.
func TestRefusals(t *testing.T) {
	h, l := newTestAPI(t, 60, 1000, 2000, &model{})
	checkAsk(t, h, l, askStep{`{"prompt": "explain", "max_tokens": 1000}`, 200, 60, "", meters{59, 999, 1940}})
	for _, s := range []askStep{
		// Above a day's budget: the burst check.
		{body: `{"prompt": "hi", "max_tokens": 2001}`, code: 400},
		{body: `{"prompt": "hi", "max_tokens": -1}`, code: 400},
		// No input token.
		{body: `{"prompt": " ", "max_tokens": 10}`, code: 400},
		{body: `{"prompt": "hi", "max_tokens": "ten"}`, code: 400},
		{body: `{"prompt": "hi"`, code: 400},
		// Above 64 KiB.
		{body: fmt.Sprintf(`{"prompt": %q}`, strings.Repeat("word ", 13108)), code: 400},
		// Above what is left today.
		{body: `{"prompt": "hi", "max_tokens": 1941}`, code: 429, rateLimit: `"otpd";r=1940;t=86400`},
	} {
		s.left = meters{59, 999, 1940}
		checkAsk(t, h, l, s)
	}

	w := ask(h, `{"prompt": "hi", "max_tokens": 2001}`)
	assert.JSONEq(t, `{"type": "about:blank", "title": "Request Cost Exceeds Capacity", "status": 400,
		"detail": "the request's cost in output-tokens, 2001, is above the burst of policy \"otpd\", 2000"}`, w.Body.String())
	w = ask(h, `{"prompt": "hi", "max_tokens": 1941}`)
	assert.Equal(t, "86400", w.Header().Get("Retry-After"), "until midnight")
}

// TestClientLeaves: a client that leaves mid-answer is charged the words
// the server wrote before it noticed, and the rest comes back.
func TestClientLeaves(t *testing.T) {
	const sent = 7
	steps := make(chan struct{}, sent) // the model writes these words, then waits
	for range sent {
		steps <- struct{}{}
	}
	answered := make(chan int64, 1)
	h, l := newTestAPI(t, 60, 1000, 2000, &model{
		pace: func(ctx context.Context) error {
			select {
			case <-steps:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		answered: func(written int64) { answered <- written },
	})
	srv := httptest.NewServer(h)
	defer srv.Close()

	r, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/completions",
		strings.NewReader(`{"prompt": "explain the leaky bucket", "max_tokens": 50}`))
	require.NoError(t, err)
	r.Header.Set("X-API-Key", "demo")
	resp, err := srv.Client().Do(r)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body := bufio.NewReader(resp.Body)
	for i := range sent {
		word, err := body.ReadString(' ')
		require.NoError(t, err)
		require.Equal(t, vocabulary[i]+" ", word)
	}
	require.NoError(t, resp.Body.Close()) // mid-answer: the connection closes

	select {
	case written := <-answered:
		assert.Equal(t, int64(sent), written)
	case <-time.After(10 * time.Second):
		t.Fatal("the server never noticed the client leave")
	}
	assert.Equal(t, meters{59, 996, 2000 - sent}, left(t, l), "the 7 words sent charged, 43 given back")
}

// brokenWriter is a ResponseRecorder whose connection breaks after words
// writes: those after fail. A negative words never breaks.
type brokenWriter struct {
	*httptest.ResponseRecorder
	words int
}

// errBroken is the failure of a brokenWriter's writes.
var errBroken = errors.New("broken pipe")

// Write writes b, unless the connection is broken.
func (w *brokenWriter) Write(b []byte) (int, error) {
	if w.words == 0 {
		return 0, errBroken
	}
	w.words--
	return w.ResponseRecorder.Write(b)
}

// WriteString writes s as Write does: the recorder's own would not break.
func (w *brokenWriter) WriteString(s string) (int, error) { return w.Write([]byte(s)) }

// TestWriteFails: an answer stops at the first write that fails and is
// charged the words written before; one that writes none is charged 1,
// the least an admitted request costs.
func TestWriteFails(t *testing.T) {
	h, l := newTestAPI(t, 60, 1000, 2000, &model{})
	w := &brokenWriter{httptest.NewRecorder(), 3}
	h.ServeHTTP(w, post(`{"prompt": "explain", "max_tokens": 50}`))
	assert.Equal(t, []string{"a", "token", "bucket"}, answerOf(w.Body.String()))
	assert.Equal(t, meters{59, 999, 1997}, left(t, l))

	w = &brokenWriter{httptest.NewRecorder(), 0}
	h.ServeHTTP(w, post(`{"prompt": "explain", "max_tokens": 50}`))
	assert.Empty(t, w.Body.String())
	assert.Equal(t, meters{58, 998, 1996}, left(t, l), "0 written settles at 1")
}

// TestConcurrentStreams: 1000 streams at once on one API key, with
// prompts of 1 to 75 words, max_tokens 100, answers of 2 to 150 words cut
// at 100, and a third of the clients leaving after 1 to 100 words, on a
// clock that stays put (no refill). No meter admits more than its budget;
// the requests and input tokens, never settled, end at their budgets less
// what the admitted requests reserved, exactly. The output tokens end at
// most at their budget less the words written: memorystore remembers only
// the last four give-backs of a bucket, so a stream that settles after more
// than four streams begun after it have settled gets less than its unused
// tokens back (docs/algorithms.md, "Giving tokens back"), and the key is
// charged more than it was sent; the test logs how much.
func TestConcurrentStreams(t *testing.T) {
	const (
		streams   = 1000
		rpm       = 100
		itpm      = 4_000
		otpd      = 10_000
		maxTokens = 100
	)
	var written atomic.Int64 // by the server
	h, l := newTestAPI(t, rpm, itpm, otpd, &model{
		pace:     func(context.Context) error { runtime.Gosched(); return nil }, // let the others decide mid-answer
		answered: func(n int64) { written.Add(n) },
	})
	rng := rand.New(rand.NewPCG(1, 2))
	prompts, cuts := make([]int, streams), make([]int, streams)
	for i := range streams {
		prompts[i], cuts[i] = 1+rng.IntN(75), -1
		if rng.IntN(3) == 0 {
			cuts[i] = 1 + rng.IntN(maxTokens)
		}
	}

	var admitted, input, received, other atomic.Int64
	var mu sync.Mutex
	refusedBy := map[string]int{} // the meters that refused, as the 429 names them
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			<-start
			w := &brokenWriter{httptest.NewRecorder(), cuts[i]}
			h.ServeHTTP(w, post(fmt.Sprintf(`{"prompt": %q, "max_tokens": %d}`, strings.Repeat("word ", prompts[i]), maxTokens)))
			switch w.Code {
			case http.StatusOK:
				admitted.Add(1)
				input.Add(int64(prompts[i]))
				received.Add(int64(len(answerOf(w.Body.String()))))
			case http.StatusTooManyRequests:
				var p struct {
					Violated []string `json:"violated-policies"`
				}
				_ = json.Unmarshal(w.Body.Bytes(), &p)
				mu.Lock()
				refusedBy[strings.Join(p.Violated, "+")]++
				mu.Unlock()
			default:
				other.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()

	got := left(t, l)
	t.Logf("%d streams: %d admitted (budget %d), refused by %v; input tokens %d (budget %d); "+
		"output tokens written %d (budget %d), left %d, given back short %d",
		streams, admitted.Load(), rpm, refusedBy, input.Load(), itpm,
		written.Load(), otpd, got.output, otpd-written.Load()-got.output)
	assert.Zero(t, other.Load(), "answers neither 200 nor 429")
	assert.Equal(t, written.Load(), received.Load(), "what the clients received is what the server counted")
	assert.LessOrEqual(t, admitted.Load(), int64(rpm))
	assert.LessOrEqual(t, input.Load(), int64(itpm))
	assert.LessOrEqual(t, written.Load(), int64(otpd))
	assert.NotEmpty(t, refusedBy, "some refused")
	assert.Equal(t, rpm-admitted.Load(), got.requests, "requests left")
	assert.Equal(t, itpm-input.Load(), got.input, "input tokens left")
	assert.LessOrEqual(t, got.output, otpd-written.Load(), "output tokens left: none given back twice")
}
