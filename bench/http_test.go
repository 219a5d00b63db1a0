package bench

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/didip/tollbooth/v7"
	"github.com/gin-gonic/gin"
	"github.com/go-chi/httprate"
	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/throttled/throttled/v2"
	ulule "github.com/ulule/limiter/v3"
	ulehttp "github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ulemem "github.com/ulule/limiter/v3/drivers/store/memory"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/echolimit"
	"github.com/tokenfair/ratelimit/ginlimit"
	"github.com/tokenfair/ratelimit/nethttp"
)

// httpPeer is one limiter's own HTTP middleware around next, keyed by the
// client's IP address (r.RemoteAddr), as each documents it.
type httpPeer struct {
	name string
	new  func(tb testing.TB, l limit, next http.Handler) http.Handler
}

// httpPeers are the middlewares, ours first. "none", "echo-none" and
// "gin-none" run the handler without a limiter, to show what the round trip
// and the framework cost by themselves; ours runs in each framework through
// its adapter.
var httpPeers = []httpPeer{
	{"none", func(_ testing.TB, _ limit, next http.Handler) http.Handler { return next }},
	{"tokenfair", func(tb testing.TB, l limit, next http.Handler) http.Handler {
		return nethttp.Wrap(tokenfairMiddleware(tb, l, nil))(next)
	}},
	{"tokenfair-result", func(tb testing.TB, l limit, next http.Handler) http.Handler {
		// The decision in the handler's context, read there (ResultFrom).
		read := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, ok := ratelimit.ResultFrom(r.Context()); !ok {
				tb.Fatal("no Result in the handler's context")
			}
			next.ServeHTTP(w, r)
		})
		return nethttp.Wrap(tokenfairMiddleware(tb, l, &ratelimit.MiddlewareOptions{ResultInContext: true}))(read)
	}},
	{"tokenfair-apikey", func(tb testing.TB, l limit, next http.Handler) http.Handler {
		return tokenfairHTTP(tb, l, ratelimit.KeyByAPIKey("X-API-Key"), next)
	}},
	{"x-time-rate", func(_ testing.TB, l limit, next http.Handler) http.Handler {
		x := newXRate(l)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			if err != nil {
				http.Error(w, "bad address", http.StatusBadRequest)
				return
			}
			if !x.allow(host) {
				http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
				return
			}
			next.ServeHTTP(w, r)
		})
	}},
	{"ulule", func(_ testing.TB, l limit, next http.Handler) http.Handler {
		lim := ulule.New(ulemem.NewStore(), ulule.Rate{Period: l.per, Limit: int64(l.n)})
		return ulehttp.NewMiddleware(lim).Handler(next)
	}},
	{"sethvargo", func(tb testing.TB, l limit, next http.Handler) http.Handler {
		mw, err := httplimit.NewMiddleware(sethvargoStore(tb, l), httplimit.IPKeyFunc())
		if err != nil {
			tb.Fatal(err)
		}
		return mw.Handle(next)
	}},
	{"throttled", func(tb testing.TB, l limit, next http.Handler) http.Handler {
		mw := &throttled.HTTPRateLimiterCtx{
			RateLimiter: throttledLimiter(tb, l),
			VaryBy:      &throttled.VaryBy{RemoteAddr: true},
		}
		return mw.RateLimit(next)
	}},
	{"httprate", func(_ testing.TB, l limit, next http.Handler) http.Handler {
		byIP := func(r *http.Request) (string, error) {
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			return httprate.CanonicalizeIP(host), err
		}
		return httprate.LimitBy(l.n, l.per, byIP)(next)
	}},
	{"echo-none", func(_ testing.TB, _ limit, next http.Handler) http.Handler {
		return echoServer(next)
	}},
	{"echo", func(_ testing.TB, l limit, next http.Handler) http.Handler {
		return echoServer(next, echomw.RateLimiterWithConfig(echomw.RateLimiterConfig{
			Store: echomw.NewRateLimiterMemoryStoreWithConfig(echoConfig(l)),
			IdentifierExtractor: func(c echo.Context) (string, error) {
				host, _, err := net.SplitHostPort(c.Request().RemoteAddr)
				return host, err
			},
		}))
	}},
	{"tokenfair-echo", func(tb testing.TB, l limit, next http.Handler) http.Handler {
		return echoServer(next, echolimit.Wrap(tokenfairMiddleware(tb, l, nil), nil))
	}},
	{"gin-none", func(_ testing.TB, _ limit, next http.Handler) http.Handler {
		return ginServer(next)
	}},
	{"tokenfair-gin", func(tb testing.TB, l limit, next http.Handler) http.Handler {
		return ginServer(next, ginlimit.Wrap(tokenfairMiddleware(tb, l, nil)))
	}},
	{"tollbooth", func(_ testing.TB, l limit, next http.Handler) http.Handler {
		lmt := tollbooth.NewLimiter(float64(l.n)/l.per.Seconds(), nil)
		lmt.SetBurst(l.n)
		lmt.SetIPLookups([]string{"RemoteAddr"})
		return tollbooth.LimitHandler(lmt, next)
	}},
}

func tokenfairHTTP(tb testing.TB, l limit, key ratelimit.KeyFunc, next http.Handler) http.Handler {
	lim, _ := tokenfairLimiter(tb, l)
	mw, err := ratelimit.NewMiddleware(lim, key, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return nethttp.Wrap(mw)(next)
}

// tokenfairMiddleware returns our core middleware keyed by client IP, for
// the framework adapters.
func tokenfairMiddleware(tb testing.TB, l limit, opts *ratelimit.MiddlewareOptions) *ratelimit.Middleware {
	byIP, err := ratelimit.KeyByIP(nil)
	if err != nil {
		tb.Fatal(err)
	}
	lim, _ := tokenfairLimiter(tb, l)
	mw, err := ratelimit.NewMiddleware(lim, byIP, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return mw
}

// ginServer returns a Gin engine (release mode, no logger) that serves next
// at /geocode behind the handlers mws.
func ginServer(next http.Handler, mws ...gin.HandlerFunc) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.Use(mws...)
	e.GET("/geocode", gin.WrapH(next))
	return e
}

// echoServer returns an Echo instance that serves next at /geocode behind
// the middleware mws.
func echoServer(next http.Handler, mws ...echo.MiddlewareFunc) http.Handler {
	e := echo.New()
	e.Use(mws...)
	e.GET("/geocode", echo.WrapHandler(next))
	return e
}

// okHandler is the application: a small JSON answer.
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"lat":48.8566,"lon":2.3522}` + "\n"))
})

// newRequest returns a request for the application from the client at
// addr (host:port), carrying an API key.
func newRequest(addr string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/geocode?q=paris", nil)
	r.RemoteAddr = addr
	r.Header.Set("X-API-Key", "key-"+addr)
	return r
}

// clients returns one request from each of n client addresses.
func clients(n int) []*http.Request {
	rs := make([]*http.Request, n)
	for i := range rs {
		rs[i] = newRequest(fmt.Sprintf("10.1.%d.%d:40000", i/256, i%256))
	}
	return rs
}

// BenchmarkHTTP measures a request's round trip through each peer's
// middleware into the application, with httptest.NewRecorder, from 1 000
// clients in turn, all allowed.
func BenchmarkHTTP(b *testing.B) {
	rs := clients(1000)
	for _, p := range httpPeers {
		b.Run(p.name, func(b *testing.B) { serveAll(b, p.new(b, allowAll, okHandler), rs) })
	}
}

// serveAll times h answering the requests rs in turn, each with a new
// httptest.ResponseRecorder, and fails unless every answer is 200.
func serveAll(b *testing.B, h http.Handler, rs []*http.Request) {
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, rs[i])
		if w.Code != http.StatusOK {
			b.Fatalf("answered %d", w.Code)
		}
		if i++; i == len(rs) {
			i = 0
		}
	}
}

// discardWriter is a ResponseWriter that keeps header fields and drops the
// rest.
type discardWriter struct{ h http.Header }

func (w discardWriter) Header() http.Header       { return w.h }
func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (discardWriter) WriteHeader(int)             {}
