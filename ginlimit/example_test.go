package ginlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/ginlimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

// The common case in one line: 5 requests a minute per API key, in bursts
// of up to 10, on an in-process store.
func ExampleLimitBy() {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(ginlimit.LimitBy(ratelimit.Per(5, time.Minute).WithBurst(10), ratelimit.KeyByAPIKey("X-API-Key")))
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })

	codes := map[int]int{}
	for range 11 {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/hello", nil)
		req.Header.Set("X-API-Key", "demo")
		r.ServeHTTP(w, req)
		codes[w.Code]++
	}
	fmt.Println(codes)
	// Output:
	// map[200:10 429:1]
}

// A Gin service limited per API key, with a key function of the core, in
// the explicit form: a store, a limiter, a core middleware.
func ExampleWrap() {
	store, _ := memorystore.New(nil)
	limiter, _ := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.Per(1, time.Minute)})
	m, err := ratelimit.NewMiddleware(limiter, ratelimit.KeyByAPIKey("X-API-Key"), nil)
	if err != nil {
		panic(err)
	}

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(ginlimit.Wrap(m))
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })

	for range 2 {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/hello", nil)
		req.Header.Set("X-API-Key", "demo")
		r.ServeHTTP(w, req)
		// The rate-limit fields are spelled as the drafts spell them: read
		// them with the map index (Get looks for "Ratelimit").
		fmt.Printf("%d %s Retry-After: %q\n", w.Code, w.Header()["RateLimit"][0], w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 "default";r=0;t=60 Retry-After: ""
	// 429 "default";r=0;t=60 Retry-After: "60"
}

// A Gin service limited per user, with the user ID that an authentication
// handler stored in the Gin context.
func ExampleNew() {
	store, _ := memorystore.New(nil)
	limiter, _ := ratelimit.New(store, ratelimit.Policy{Name: "per-user", Limit: ratelimit.Per(1, time.Minute)})
	perUser, err := ginlimit.New(limiter, ginlimit.KeyByValue("user"), &ratelimit.MiddlewareOptions{Headers: ratelimit.HeadersLegacy})
	if err != nil {
		panic(err)
	}

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	authenticate := func(c *gin.Context) {
		if token := c.GetHeader("Authorization"); token == "Bearer alice-token" {
			c.Set("user", "alice")
		}
	}
	r.GET("/me", authenticate, perUser, func(c *gin.Context) { c.String(http.StatusOK, "hi\n") })

	for _, token := range []string{"Bearer alice-token", "Bearer alice-token", ""} {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/me", nil)
		req.Header.Set("Authorization", token)
		r.ServeHTTP(w, req)
		fmt.Printf("%d RateLimit-Remaining: %q\n", w.Code, w.Header()["RateLimit-Remaining"])
	}
	// Output:
	// 200 RateLimit-Remaining: ["0"]
	// 429 RateLimit-Remaining: ["0"]
	// 401 RateLimit-Remaining: []
}

// Keys by the client address that Gin finds behind the proxies it trusts.
func ExampleKeyByClientIP() {
	byIP, err := ginlimit.KeyByClientIP(&ratelimit.IPOptions{IPv6Prefix: 64})
	if err != nil {
		panic(err)
	}
	c, engine := gin.CreateTestContext(httptest.NewRecorder())
	engine.SetTrustedProxies([]string{"10.0.0.0/8"})
	c.Request = httptest.NewRequest("GET", "/", nil)
	c.Request.RemoteAddr = "10.0.0.7:41000"
	c.Request.Header.Set("X-Forwarded-For", "2001:db8:1:2::99")
	fmt.Println(byIP(c))
	// Output:
	// ip:2001:db8:1:2::/64 <nil>
}
