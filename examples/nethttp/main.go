// Command nethttp is the smallest net/http service behind the rate limiter.
//
//	go run ./examples/nethttp
//	curl -i -H 'X-API-Key: demo' localhost:8080/hello
//	curl -i localhost:8080/search
//
// It shows the library's two forms:
//
//   - GET /hello, the common case in one line (nethttp.LimitBy): each API key
//     (header X-API-Key) may make 10 requests at once and earns 5 more per
//     second; a request without a key gets 401.
//   - GET /search, the explicit form (a store, a limiter, a middleware) for
//     anything the one line does not do: here each client IP may make 100
//     requests a minute, told in the legacy header fields.
package main

import (
	"io"
	"log"
	"net/http"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
)

func main() {
	mux := http.NewServeMux()

	// One line.
	limit := nethttp.LimitBy(ratelimit.PerSecond(5).WithBurst(10), ratelimit.KeyByAPIKey("X-API-Key"))
	mux.Handle("GET /hello", limit(http.HandlerFunc(hello)))

	// The explicit form: a store, a limiter, a middleware.
	byIP, err := ratelimit.KeyByIP(nil) // no proxy in front: the client is the peer
	if err != nil {
		log.Fatal(err)
	}
	store, err := memorystore.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.Per(100, time.Minute)})
	if err != nil {
		log.Fatal(err)
	}
	mw, err := ratelimit.NewMiddleware(limiter, byIP, &ratelimit.MiddlewareOptions{Headers: ratelimit.HeadersLegacy})
	if err != nil {
		log.Fatal(err)
	}
	mux.Handle("GET /search", nethttp.Wrap(mw)(http.HandlerFunc(search)))

	log.Fatal(http.ListenAndServe(":8080", mux))
}

func hello(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello\n") }

func search(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "no results\n") }
