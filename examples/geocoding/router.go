package main

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/labstack/echo/v4"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/echolimit"
	"github.com/tokenfair/ratelimit/ginlimit"
	"github.com/tokenfair/ratelimit/nethttp"
)

// newRouter returns the server's routes, served by the framework that
// -framework names, with every request except /healthz and GET /metrics
// limited by mw, but those of the RPC route, limited by rpc.mw; batch
// answers POST /geocode/batch. The three routers answer alike: the same
// handlers write every body, and the limiter's answers are the core's (on
// the RPC route, grpclimit's).
func newRouter(framework string, mw *ratelimit.Middleware, metrics, batch http.Handler, rpc rpcRoute) (http.Handler, error) {
	switch framework {
	case "nethttp":
		return nethttpRouter(mw, metrics, batch, rpc), nil
	case "gin":
		return ginRouter(mw, metrics, batch, rpc), nil
	case "echo":
		return echoRouter(mw, metrics, batch, rpc), nil
	}
	return nil, fmt.Errorf("-framework %s: want nethttp, gin or echo", framework)
}

func nethttpRouter(mw *ratelimit.Middleware, metrics, batch http.Handler, rpc rpcRoute) http.Handler {
	api := http.NewServeMux()
	api.HandleFunc("GET /geocode", geocode)
	api.HandleFunc("/geocode", methodNotAllowed)
	api.Handle("POST "+batchPath, batch)
	api.HandleFunc(batchPath, batchMethodNotAllowed)
	api.HandleFunc("/", notFound)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("/healthz", methodNotAllowed)
	mux.Handle("GET /metrics", metrics)
	mux.Handle(geocodeProcedure, nethttp.Wrap(rpc.mw)(rpc.h)) // every method: Connect answers 405
	mux.Handle("/", nethttp.Wrap(mw)(api))
	return mux
}

// unlimited reports whether r is one of the requests that the limiter
// never sees, as the net/http router sends them: /healthz, with any method,
// and GET or HEAD /metrics.
func unlimited(r *http.Request) bool {
	switch r.URL.Path {
	case "/healthz":
		return true
	case "/metrics":
		return r.Method == http.MethodGet || r.Method == http.MethodHead
	}
	return false
}

// wrongMethod answers a request whose path exists for other methods: 405,
// except for /metrics, which the net/http router sends to the API's 404.
func wrongMethod(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/metrics":
		notFound(w, r)
	case batchPath:
		batchMethodNotAllowed(w, r)
	default:
		methodNotAllowed(w, r)
	}
}

// ginRouter is Gin in release mode, without its redirects (which net/http's
// router does not make either), every unknown route answered by the same
// handlers as the net/http router.
func ginRouter(mw *ratelimit.Middleware, metrics, batch http.Handler, rpc rpcRoute) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.RedirectTrailingSlash = false
	e.RedirectFixedPath = false
	limit, limitRPC := ginlimit.Wrap(mw), ginlimit.Wrap(rpc.mw)
	e.Use(func(c *gin.Context) {
		switch {
		case unlimited(c.Request):
		case c.Request.URL.Path == geocodeProcedure:
			limitRPC(c)
		default:
			limit(c)
		}
	})
	e.Any(geocodeProcedure, gin.WrapH(rpc.h))
	for path, h := range map[string]http.Handler{
		"/healthz": http.HandlerFunc(healthz),
		"/metrics": metrics,
		"/geocode": http.HandlerFunc(geocode),
	} {
		e.GET(path, gin.WrapH(h))
		e.HEAD(path, gin.WrapH(h))
	}
	e.POST(batchPath, gin.WrapH(batch))
	e.NoRoute(func(c *gin.Context) {
		switch c.Request.URL.Path {
		case "/healthz", "/geocode", "/metrics", batchPath:
			wrongMethod(c.Writer, c.Request)
		default:
			notFound(c.Writer, c.Request)
		}
	})
	return e
}

// echoRouter is Echo with its 404 and 405 answered by the same handlers as
// the net/http router. The limiter writes its answers itself
// (WriteResponse), so that they are the core's bytes even when Echo's
// error handler would indent them (a "pretty" query parameter).
func echoRouter(mw *ratelimit.Middleware, metrics, batch http.Handler, rpc rpcRoute) http.Handler {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	limit := echolimit.Wrap(mw, &echolimit.Options{WriteResponse: true})
	limitRPC := echolimit.Wrap(rpc.mw, &echolimit.Options{WriteResponse: true})
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		limited, limitedRPC := limit(next), limitRPC(next)
		return func(c echo.Context) error {
			switch {
			case unlimited(c.Request()):
				return next(c)
			case c.Request().URL.Path == geocodeProcedure:
				return limitedRPC(c)
			}
			return limited(c)
		}
	})
	e.Any(geocodeProcedure, echo.WrapHandler(rpc.h))
	wrong := echo.WrapHandler(http.HandlerFunc(wrongMethod))
	for path, h := range map[string]http.Handler{
		"/healthz": http.HandlerFunc(healthz),
		"/metrics": metrics,
		"/geocode": http.HandlerFunc(geocode),
	} {
		e.Any(path, wrong) // OPTIONS too, which Echo would answer itself
		e.GET(path, echo.WrapHandler(h))
		e.HEAD(path, echo.WrapHandler(h))
	}
	e.Any(batchPath, wrong)
	e.POST(batchPath, echo.WrapHandler(batch))
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		switch {
		case errors.Is(err, echo.ErrNotFound):
			notFound(c.Response(), c.Request())
		case errors.Is(err, echo.ErrMethodNotAllowed): // a method Echo does not know
			wrongMethod(c.Response(), c.Request())
		default:
			e.DefaultHTTPErrorHandler(err, c)
		}
	}
	return e
}
