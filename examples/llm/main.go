// Command llm is an LLM-style endpoint behind the rate limiter, whose cost
// is the tokens it reads and writes, known only once it has answered: each
// request reserves an estimate from the length of its prompt, streams a
// made-up answer, then settles the tokens it used with ratelimit.Settle.
// An answer shorter than the estimate gives the rest back; a longer one
// takes the rest past empty, and the key's next requests wait until that
// debt is repaid, all of it.
//
//	go run ./examples/llm
//	curl -N -H 'X-API-Key: demo' --data 'what is a token bucket' localhost:8081/v1/complete
//	curl -N -H 'X-API-Key: demo' --data 'explain the leaky bucket' localhost:8081/v1/complete
//	curl -i -H 'X-API-Key: demo' --data 'and now' localhost:8081/v1/complete
//
// A token is a word of the prompt or the answer. Each API key earns 5
// tokens a second and holds 50 at most (-rate, -burst). A prompt of n
// tokens reserves 4n: itself and an answer up to three times as long. The
// made-up model answers with twice as many words as the prompt has, but
// with 60 to a prompt that starts with "explain": the first request above
// spends 15 of the 20 it reserves (35 left), the second 64 of 16, which
// leaves the key 29 tokens in debt, so that the third, which needs 8, is
// refused with Retry-After: 8 (37 tokens at 5 a second, less those earned
// between the commands).
package main

import (
	"bytes"
	"errors"
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
	rate := flag.Int64("rate", 5, "tokens earned per second by each API key")
	burst := flag.Int64("burst", 50, "the most tokens an API key holds")
	flag.Parse()
	h, err := newHandler(*rate, *burst, nil)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("llm: listening on %s", *addr)
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

// maxPrompt bounds a prompt, in bytes.
const maxPrompt = 64 << 10

// newHandler returns the endpoint POST /v1/complete, limited to rate
// tokens a second and burst at most per API key, by clock (nil: the
// system's).
func newHandler(rate, burst int64, clock func() time.Time) (http.Handler, error) {
	store, err := memorystore.New(&memorystore.Options{Clock: clock})
	if err != nil {
		return nil, err
	}
	limiter, err := ratelimit.New(store, ratelimit.Policy{Name: "tokens", Limit: ratelimit.PerSecond(rate).WithBurst(burst)})
	if err != nil {
		return nil, err
	}
	mw, err := ratelimit.NewMiddleware(limiter, ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{
		Cost:            estimate,
		ResultInContext: true, // for Settle
		Clock:           clock,
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/complete", nethttp.Wrap(mw)(http.HandlerFunc(complete)))
	return mux, nil
}

// estimate is the cost the Middleware reserves for r: four tokens per
// token of its prompt. It reads the prompt and leaves it in r.Body for
// the handler.
func estimate(r *http.Request) (int64, error) {
	prompt, err := io.ReadAll(io.LimitReader(r.Body, maxPrompt+1))
	switch {
	case err != nil:
		return 0, err
	case len(prompt) > maxPrompt:
		return 0, fmt.Errorf("a prompt of more than %d bytes", maxPrompt)
	}
	r.Body = io.NopCloser(bytes.NewReader(prompt))
	n := tokens(string(prompt))
	if n == 0 {
		return 0, errors.New("an empty prompt")
	}
	return 4 * n, nil
}

// tokens counts the tokens of s: its words.
func tokens(s string) int64 { return int64(len(strings.Fields(s))) }

// complete streams the made-up answer to the prompt of r, a word at a
// time, then settles the request's cost at the tokens of the prompt and
// of the answer, and writes them last.
func complete(w http.ResponseWriter, r *http.Request) {
	prompt, _ := io.ReadAll(r.Body) // estimate read it all
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	flusher, _ := w.(http.Flusher)
	answer := answer(string(prompt))
	for _, word := range answer {
		io.WriteString(w, word+" ")
		if flusher != nil {
			flusher.Flush()
		}
	}
	in, out := tokens(string(prompt)), int64(len(answer))
	if err := ratelimit.Settle(r.Context(), "requests", in+out); err != nil {
		slog.Error("llm: the request's cost is not settled", "err", err)
	}
	fmt.Fprintf(w, "\n\n[%d tokens: %d of prompt, %d of answer; %d reserved]\n", in+out, in, out, 4*in)
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
