// Command echo is the smallest Echo service behind the rate limiter: each
// client IP may make 10 requests at once and earns 5 more per second.
// Refusals go through Echo's error handler, which writes the limiter's 429.
//
//	go run ./examples/echo
//	curl -i localhost:8080/hello
package main

import (
	"log"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/echolimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

func main() {
	store, err := memorystore.New()
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	limiter, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(5).WithBurst(10)})
	if err != nil {
		log.Fatal(err)
	}
	byIP, err := echolimit.KeyByRealIP() // c.RealIP(), through e.IPExtractor
	if err != nil {
		log.Fatal(err)
	}
	limit, err := echolimit.New(limiter, byIP)
	if err != nil {
		log.Fatal(err)
	}

	e := echo.New()
	e.IPExtractor = echo.ExtractIPDirect() // no proxy in front: the client is the peer
	e.Use(limit)
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello\n") })
	log.Fatal(e.Start(":8080"))
}
