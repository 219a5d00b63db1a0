package echolimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/echolimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

// The common case in one line: 5 requests a minute per API key, in bursts
// of up to 10, on an in-process store.
func ExampleLimitBy() {
	e := echo.New()
	e.Use(echolimit.LimitBy(ratelimit.Per(5, time.Minute).WithBurst(10), ratelimit.KeyByAPIKey("X-API-Key")))
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello\n") })

	codes := map[int]int{}
	for range 11 {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/hello", nil)
		req.Header.Set("X-API-Key", "demo")
		e.ServeHTTP(w, req)
		codes[w.Code]++
	}
	fmt.Println(codes)
	// Output:
	// map[200:10 429:1]
}

// An Echo service limited per API key, with a key function of the core, in
// the explicit form: a store, a limiter, a core middleware. Refusals go
// through Echo's error path, and the default error handler writes the
// core's answer.
func ExampleWrap() {
	store, _ := memorystore.New(nil)
	limiter, _ := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.Per(1, time.Minute)})
	m, err := ratelimit.NewMiddleware(limiter, ratelimit.KeyByAPIKey("X-API-Key"), nil)
	if err != nil {
		panic(err)
	}

	e := echo.New()
	e.Use(echolimit.Wrap(m, nil))
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello\n") })

	for range 2 {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/hello", nil)
		req.Header.Set("X-API-Key", "demo")
		e.ServeHTTP(w, req)
		// The rate-limit fields are spelled as the drafts spell them: read
		// them with the map index (Get looks for "Ratelimit").
		fmt.Printf("%d %s Retry-After: %q\n", w.Code, w.Header()["RateLimit"][0], w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 "default";r=0;t=60 Retry-After: ""
	// 429 "default";r=0;t=60 Retry-After: "60"
}

// An Echo service limited per user, with the user ID that an authentication
// middleware stored in the Echo context.
func ExampleNew() {
	store, _ := memorystore.New(nil)
	limiter, _ := ratelimit.New(store, ratelimit.Policy{Name: "per-user", Limit: ratelimit.Per(1, time.Minute)})
	perUser, err := echolimit.New(limiter, echolimit.KeyByValue("user"), &ratelimit.MiddlewareOptions{Headers: ratelimit.HeadersLegacy}, nil)
	if err != nil {
		panic(err)
	}

	e := echo.New()
	authenticate := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if c.Request().Header.Get("Authorization") == "Bearer alice-token" {
				c.Set("user", "alice")
			}
			return next(c)
		}
	}
	e.GET("/me", func(c echo.Context) error { return c.String(http.StatusOK, "hi\n") }, authenticate, perUser)

	for _, token := range []string{"Bearer alice-token", "Bearer alice-token", ""} {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/me", nil)
		req.Header.Set("Authorization", token)
		e.ServeHTTP(w, req)
		fmt.Printf("%d RateLimit-Remaining: %q\n", w.Code, w.Header()["RateLimit-Remaining"])
	}
	// Output:
	// 200 RateLimit-Remaining: ["0"]
	// 429 RateLimit-Remaining: ["0"]
	// 401 RateLimit-Remaining: []
}

// Keys by the client address that the Echo instance's IPExtractor finds
// behind trusted proxies.
func ExampleKeyByRealIP() {
	byIP, err := echolimit.KeyByRealIP(nil)
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.IPExtractor = echo.ExtractIPFromXFFHeader() // trusts private and loopback proxies
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "10.0.0.7:41000"
	req.Header.Set("X-Forwarded-For", "203.0.113.9")
	fmt.Println(byIP(e.NewContext(req, httptest.NewRecorder())))
	// Output:
	// ip:203.0.113.9 <nil>
}

// Writes refusals directly, as net/http does, instead of returning an
// *echo.HTTPError.
func ExampleOptions_writeResponse() {
	store, _ := memorystore.New(nil)
	limiter, _ := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.Per(1, time.Minute)})
	m, err := ratelimit.NewMiddleware(limiter, ratelimit.KeyByAPIKey("X-API-Key"), nil)
	if err != nil {
		panic(err)
	}

	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) { fmt.Println("never called for refusals") }
	e.Use(echolimit.Wrap(m, &echolimit.Options{WriteResponse: true}))
	e.GET("/", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })

	for range 2 {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-API-Key", "demo")
		e.ServeHTTP(w, req)
		fmt.Printf("%d Content-Type: %q\n", w.Code, w.Header().Get("Content-Type"))
	}
	// Output:
	// 204 Content-Type: ""
	// 429 Content-Type: "application/problem+json"
}
