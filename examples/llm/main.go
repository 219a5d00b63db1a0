// Command llm is a model API behind the rate limiter, metered as model APIs
// are, with three policies per API key, each named as its flag:
//
//   - rpm: 60 requests a minute;
//   - itpm: 1000 input-tokens a minute, the tokens of the prompt;
//   - otpd: 2000 output-tokens a day, from 00:00 UTC, reserved at the
//     request's max_tokens (256 when it has none), the most it may be
//     answered, and settled with ratelimit.Settle when the answer ends, at
//     the tokens written: the rest comes back.
//
// One decision reserves all three, or nothing when one refuses. The input
// tokens are known before the answer, so they need no settlement. A token
// is a word. The made-up model answers twice as many words as the prompt
// has, or 60 to a prompt that starts with "explain", cut at max_tokens, a
// word every -pace (100ms).
//
//	go run ./examples/llm
//	curl -i -N -H 'X-API-Key: demo' -d '{"prompt": "what is a token bucket", "max_tokens": 100}' localhost:8081/v1/completions
//	curl -N -H 'X-API-Key: demo' -d '{"prompt": "explain the leaky bucket"}' localhost:8081/v1/completions
//	curl -i -H 'X-API-Key: demo' -d '{"prompt": "hi", "max_tokens": 5000}' localhost:8081/v1/completions
//
// The first lists the policies in RateLimit-Policy, reserves 1 request, 5
// input tokens and 100 output tokens, writes 10 words and gives 90 output
// tokens back. The second reserves 256 and writes 60: press Ctrl-C midway
// and it is charged the words it was sent. The third is answered 400: no
// day holds 5000 output tokens. A max_tokens that a day holds but today no
// longer does is answered 429, with Retry-After until midnight UTC.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
)

func main() {
	addr := flag.String("addr", ":8081", "listen `address`")
	rpm := flag.Int64("rpm", 60, "requests a minute per API key")
	itpm := flag.Int64("itpm", 1000, "input tokens a minute per API key")
	otpd := flag.Int64("otpd", 2000, "output tokens a day (UTC) per API key")
	pace := flag.Duration("pace", 100*time.Millisecond, "the model's time per word")
	flag.Parse()
	limiter, err := newLimiter(*rpm, *itpm, *otpd, nil)
	if err != nil {
		log.Fatal(err)
	}
	h, err := newHandler(limiter, nil, &model{pace: every(*pace)})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("llm: listening on %s", *addr)
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// newLimiter returns the three meters of each API key: rpm requests and
// itpm input tokens a minute, and otpd output tokens a day, from 00:00
// UTC, on a store that reads clock (nil: the system's).
func newLimiter(rpm, itpm, otpd int64, clock func() time.Time) (*ratelimit.Limiter, error) {
	store, err := memorystore.New(&memorystore.Options{Clock: clock})
	if err != nil {
		return nil, err
	}
	return ratelimit.New(store,
		ratelimit.Policy{Name: "rpm", Limit: ratelimit.Per(rpm, time.Minute)},
		ratelimit.Policy{Name: "itpm", Limit: ratelimit.Per(itpm, time.Minute), Unit: "input-tokens"},
		ratelimit.Policy{Name: "otpd", Limit: ratelimit.Daily(otpd, time.UTC), Unit: "output-tokens"},
	)
}

// newHandler returns the endpoint POST /v1/completions of m, limited per
// API key by l, whose store reads clock (nil: the system's).
func newHandler(l *ratelimit.Limiter, clock func() time.Time, m *model) (http.Handler, error) {
	mw, err := ratelimit.NewMiddleware(l, ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{
		Costs: map[string]func(*http.Request) (int64, error){
			"input-tokens":  promptTokens,
			"output-tokens": maxTokens,
		},
		ResultInContext: true, // for Settle
		Clock:           clock,
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/completions", nethttp.Wrap(mw)(http.HandlerFunc(m.complete)))
	return mux, nil
}

// completion is a request's body.
type completion struct {
	Prompt    string `json:"prompt"`
	MaxTokens int64  `json:"max_tokens"` // 0: defaultMaxTokens
}

// maxBody bounds a request's body, in bytes.
const maxBody = 64 << 10

// defaultMaxTokens is the max_tokens of a request without one.
const defaultMaxTokens = 256

// readCompletion decodes the body of r and leaves it in r.Body for the next
// reader: each cost function and the handler decode it in turn.
func readCompletion(r *http.Request) (completion, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	switch {
	case err != nil:
		return completion{}, err
	case len(body) > maxBody:
		return completion{}, fmt.Errorf("a body of more than %d bytes", maxBody)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var c completion
	if err := json.Unmarshal(body, &c); err != nil {
		return completion{}, err
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = defaultMaxTokens
	}
	return c, nil
}

// promptTokens is what r reserves of input-tokens: the tokens of its
// prompt. The Middleware answers 400 to an empty prompt, whose cost is 0.
func promptTokens(r *http.Request) (int64, error) {
	c, err := readCompletion(r)
	return tokens(c.Prompt), err
}

// maxTokens is what r reserves of output-tokens: its max_tokens. The
// Middleware answers 400 to a negative one, or one above a day's budget.
func maxTokens(r *http.Request) (int64, error) {
	c, err := readCompletion(r)
	return c.MaxTokens, err
}

// tokens counts the tokens of s: its words.
func tokens(s string) int64 { return int64(len(strings.Fields(s))) }

// model is the made-up model behind the endpoint. The zero model answers
// without a pause.
type model struct {
	// pace, if set, is awaited before each word; the answer stops where it
	// fails: the model's time per word, or a test's steps.
	pace func(ctx context.Context) error
	// answered, if set, is told the words of each answer once they are
	// settled: a test's look.
	answered func(written int64)
}

// every returns a pace of d a word, which fails when its context ends;
// nil for 0.
func every(d time.Duration) func(context.Context) error {
	if d <= 0 {
		return nil
	}
	return func(ctx context.Context) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// complete streams the made-up answer to the request's prompt, cut at its
// max_tokens, then settles its output tokens at the words written, fewer
// when the client leaves, and ends a whole answer with the request's usage.
func (m *model) complete(w http.ResponseWriter, r *http.Request) {
	c, _ := readCompletion(r) // the cost functions decoded it already
	words := answer(c.Prompt)
	if int64(len(words)) > c.MaxTokens {
		words = words[:c.MaxTokens]
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	written := m.stream(r.Context(), w, words)
	if err := ratelimit.Settle(r.Context(), "output-tokens", written); err != nil {
		slog.Error("llm: the output tokens are not settled", "err", err)
	}
	if m.answered != nil {
		m.answered(written)
	}
	if written == int64(len(words)) {
		fmt.Fprintf(w, "\n\n[input tokens: %d, output tokens: %d of %d]\n", tokens(c.Prompt), written, c.MaxTokens)
	}
}

// stream writes words to w, each flushed on its own, and returns how many
// it wrote before they ran out, ctx ended, the pace failed or a write
// did.
func (m *model) stream(ctx context.Context, w http.ResponseWriter, words []string) (written int64) {
	rc := http.NewResponseController(w)
	for _, word := range words {
		if ctx.Err() != nil || m.pace != nil && m.pace(ctx) != nil {
			break
		}
		if _, err := io.WriteString(w, word+" "); err != nil {
			break
		}
		if err := rc.Flush(); err != nil {
			break
		}
		written++
	}
	return written
}

// vocabulary is what the made-up model says.
var vocabulary = strings.Fields(`a token bucket holds up to a burst of tokens and earns them back at a
steady rate; a request spends what it costs, and one that finds too few is refused until enough
have come back, which Retry-After tells`)

// answer returns the made-up answer to prompt, word by word: twice as many
// words as the prompt has, or 60 when it starts with "explain".
func answer(prompt string) []string {
	n := 2 * len(strings.Fields(prompt))
	if strings.HasPrefix(strings.ToLower(strings.TrimSpace(prompt)), "explain") {
		n = 60
	}
	words := make([]string, n)
	for i := range words {
		words[i] = vocabulary[i%len(vocabulary)]
	}
	return words
}
