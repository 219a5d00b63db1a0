// Command gin is the smallest Gin service behind the rate limiter: each
// client IP may make 10 requests at once and earns 5 more per second.
//
//	go run ./examples/gin
//	curl -i localhost:8080/hello
package main

import (
	"log"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/ginlimit"
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
	byIP, err := ginlimit.KeyByClientIP() // c.ClientIP(), as Gin's trusted proxies allow
	if err != nil {
		log.Fatal(err)
	}
	limit, err := ginlimit.New(limiter, byIP)
	if err != nil {
		log.Fatal(err)
	}

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	if err := r.SetTrustedProxies(nil); err != nil { // no proxy in front: the client is the peer
		log.Fatal(err)
	}
	r.Use(limit)
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })
	log.Fatal(r.Run(":8080"))
}
