// Command gin is the smallest Gin service behind the rate limiter.
//
//	go run ./examples/gin
//	curl -i -H 'X-API-Key: demo' localhost:8080/hello
//	curl -i localhost:8080/search
//
// It shows the library's two forms:
//
//   - GET /hello, the common case in one line (ginlimit.LimitBy): each API key
//     (header X-API-Key) may make 10 requests at once and earns 5 more per
//     second; a request without a key gets 401.
//   - GET /search, the explicit form (a store, a limiter, a handler) for
//     anything the one line does not do: here each client IP, as Gin's
//     c.ClientIP() finds it, may make 100 requests a minute, told in the
//     legacy header fields.
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/ginlimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

func main() {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	if err := r.SetTrustedProxies(nil); err != nil { // no proxy in front: the client is the peer
		log.Fatal(err)
	}

	// One line.
	r.GET("/hello", ginlimit.LimitBy(ratelimit.PerSecond(5).WithBurst(10), ratelimit.KeyByAPIKey("X-API-Key")), hello)

	// The explicit form: a store, a limiter, a handler.
	byIP, err := ginlimit.KeyByClientIP(nil) // c.ClientIP(), as Gin's trusted proxies allow
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
	limit, err := ginlimit.New(limiter, byIP, &ratelimit.MiddlewareOptions{Headers: ratelimit.HeadersLegacy})
	if err != nil {
		log.Fatal(err)
	}
	r.GET("/search", limit, search)

	log.Fatal(r.Run(":8080"))
}

func hello(c *gin.Context) { c.String(http.StatusOK, "hello\n") }

func search(c *gin.Context) { c.String(http.StatusOK, "no results\n") }
