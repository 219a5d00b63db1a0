package grpclimit

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/tokenfair/ratelimit"
)

// KeyByMethod is a ratelimit.KeyFunc that keys a call by its full method,
// "/pkg.Service/Method", the path of a Server's request and of a Connect or
// gRPC request over HTTP; another path gives an error wrapping
// ratelimit.ErrBadRequest. A budget per client and method:
// ratelimit.JoinKeyFuncs(grpclimit.KeyByMethod, byAPIKey).
func KeyByMethod(r *http.Request) (string, error) {
	if m := r.URL.Path; isFullMethod(m) {
		return m, nil
	}
	return "", fmt.Errorf("%w: grpclimit: KeyByMethod: the request's path is not a full method, /package.Service/Method", ratelimit.ErrBadRequest)
}

// isFullMethod reports whether m is a full method: a slash, a service, a
// slash and a method, neither empty.
func isFullMethod(m string) bool {
	svc, method, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/")
	return ok && m[0] == '/' && svc != "" && method != "" && !strings.Contains(method, "/")
}
