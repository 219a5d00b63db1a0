// The consumer: a program outside the repository that uses every published
// package of tokenfair/ratelimit as a user's go get fetches them. It exits
// non-zero when a request is not answered as the README says.
package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/echolimit"
	"github.com/tokenfair/ratelimit/ginlimit"
	"github.com/tokenfair/ratelimit/grpclimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/metrics"
	"github.com/tokenfair/ratelimit/nethttp"
	"github.com/tokenfair/ratelimit/otellimit"
	"github.com/tokenfair/ratelimit/redisstore"
)

func main() {
	limit := ratelimit.Per(1, time.Minute) // one request, then 429
	key := ratelimit.KeyByAPIKey("X-API-Key")
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })

	failed := false
	request := func() *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-API-Key", "consumer")
		return r
	}
	check := func(name string, h http.Handler) {
		for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, request())
			if w.Code != want {
				fmt.Printf("%s: request %d = %d, want %d\n", name, i+1, w.Code, want)
				failed = true
			}
		}
	}

	check("nethttp.LimitBy", nethttp.LimitBy(limit, key)(ok))

	gin.SetMode(gin.ReleaseMode)
	g := gin.New()
	g.Use(ginlimit.LimitBy(limit, key))
	g.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	check("ginlimit.LimitBy", g)

	e := echo.New()
	e.Use(echolimit.LimitBy(limit, key))
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "ok") })
	check("echolimit.LimitBy", e)

	// The explicit form: a memory store, a limiter, Prometheus metrics.
	store, err := memorystore.New(nil)
	must(err)
	limiter, err := ratelimit.New(store, ratelimit.Policy{Name: "api", Limit: limit})
	must(err)
	m, err := metrics.New(prometheus.NewRegistry())
	must(err)
	mw, err := ratelimit.NewMiddleware(limiter, key, &ratelimit.MiddlewareOptions{Observe: m.Observe})
	must(err)
	check("memorystore+metrics", nethttp.Wrap(mw)(ok))

	// The operator's controls: a penalty box, lifted by a reset.
	guarded, err := ratelimit.New(store, ratelimit.Policy{Name: "login", Limit: limit,
		Penalty: ratelimit.Penalty{After: 1, For: time.Hour}})
	must(err)
	gmw, err := ratelimit.NewMiddleware(guarded, key, nil)
	must(err)
	login := nethttp.Wrap(gmw)(ok)
	check("penalty box", login)
	w := httptest.NewRecorder()
	login.ServeHTTP(w, request())
	if got := w.Header().Get("Retry-After"); got != "3600" {
		fmt.Printf("penalty box: Retry-After %q, want 3600, the ban's\n", got)
		failed = true
	}
	id, err := key(request())
	must(err)
	must(guarded.Reset(context.Background(), id))
	check("penalty box after Limiter.Reset", login)

	// RPCs: a refusal in the caller's protocol (Connect, for a request in
	// none), and a gRPC server's interceptors over the same limiter.
	rpc, err := ratelimit.New(store, ratelimit.Policy{Name: "rpc", Limit: limit})
	must(err)
	otel, err := otellimit.New(nil) // the global meter provider
	must(err)
	rmw, err := ratelimit.NewMiddleware(rpc, key, &ratelimit.MiddlewareOptions{OnDeny: grpclimit.OnDeny, Observe: otel.Observe})
	must(err)
	connect := nethttp.Wrap(rmw)(ok)
	check("grpclimit.OnDeny", connect)
	w = httptest.NewRecorder()
	connect.ServeHTTP(w, request())
	if !strings.Contains(w.Body.String(), `"code":"resource_exhausted"`) {
		fmt.Printf("grpclimit.OnDeny: body %q, want a Connect error resource_exhausted\n", w.Body.String())
		failed = true
	}
	srv, err := grpclimit.NewServer(rpc, key, nil)
	must(err)
	_, _ = srv.UnaryInterceptor(), srv.StreamInterceptor()

	// A Redis store over a client that is never asked anything.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	_, err = redisstore.New(client, &redisstore.Options{Lease: 50 * time.Millisecond})
	must(err)
	must(client.Close())

	if failed {
		os.Exit(1)
	}
	fmt.Println("consumer: nethttp, ginlimit, echolimit, memorystore, metrics, the penalty box, Reset, grpclimit, otellimit and redisstore work")
}

func must(err error) {
	if err != nil {
		fmt.Println("consumer:", err)
		os.Exit(1)
	}
}
