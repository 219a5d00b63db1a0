// Package nethttp adapts a [ratelimit.Middleware] to net/http: it has the
// func(http.Handler) http.Handler shape that routers such as chi and
// gorilla/mux accept, and wraps a plain http.ServeMux as well.
package nethttp

import (
	"net/http"

	"github.com/tokenfair/ratelimit"
)

// Middleware returns middleware that lets a request reach next only when m
// admits it; otherwise m has already answered it (429, or the error
// handler's answer).
func Middleware(m *ratelimit.Middleware) func(next http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if m.Admit(w, r) {
				next.ServeHTTP(w, r)
			}
		})
	}
}
