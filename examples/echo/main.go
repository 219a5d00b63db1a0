// Command echo is the smallest Echo service behind the rate limiter.
//
//	go run ./examples/echo
//	curl -i -H 'X-API-Key: demo' localhost:8080/hello
//	curl -i localhost:8080/search
//
// It shows the library's two forms:
//
//   - GET /hello, the common case in one line (echolimit.LimitBy): each API
//     key (header X-API-Key) may make 10 requests at once and earns 5 more
//     per second; a request without a key gets 401.
//   - GET /search, the explicit form (a store, a limiter, a middleware) for
//     anything the one line does not do: here each client IP, as Echo's
//     c.RealIP() finds it, may make 100 requests a minute, told in the
//     legacy header fields.
//
// Refusals go through Echo's error handler, which writes the limiter's 429.
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/echolimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

func main() {
	e := echo.New()
	e.IPExtractor = echo.ExtractIPDirect() // no proxy in front: the client is the peer

	// One line.
	e.GET("/hello", hello, echolimit.LimitBy(ratelimit.PerSecond(5).WithBurst(10), ratelimit.KeyByAPIKey("X-API-Key")))

	// The explicit form: a store, a limiter, a middleware.
	byIP, err := echolimit.KeyByRealIP(nil) // c.RealIP(), through e.IPExtractor
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
	limit, err := echolimit.New(limiter, byIP, &ratelimit.MiddlewareOptions{Headers: ratelimit.HeadersLegacy}, nil)
	if err != nil {
		log.Fatal(err)
	}
	e.GET("/search", search, limit)

	log.Fatal(e.Start(":8080"))
}

func hello(c echo.Context) error { return c.String(http.StatusOK, "hello\n") }

func search(c echo.Context) error { return c.String(http.StatusOK, "no results\n") }
