// Package adaptertest is a conformance suite for the framework adapters of
// [ratelimit.Middleware]. Every adapter in this project passes it (nethttp,
// and the ginlimit and echolimit modules), and so should yours:
//
//	func TestConformance(t *testing.T) {
//		adaptertest.Run(t, func(t *testing.T, l *ratelimit.Limiter, key ratelimit.KeyFunc,
//			opts *ratelimit.MiddlewareOptions, next http.Handler) http.Handler {
//			m, err := ratelimit.NewMiddleware(l, key, opts)
//			require.NoError(t, err)
//			engine := myframework.New()
//			engine.Use(myadapter.Wrap(m))
//			engine.Any("/*", myframework.Wrap(next))
//			return engine
//		})
//	}
//
// Each test sends the same requests over real HTTP connections to the
// adapter and to a reference, the core middleware on a bare net/http
// server, and requires identical answers on the wire (status, every header
// field but Date, body bytes) and the same number of runs of next. It
// checks what an adapter is responsible for: next runs only when the
// request is admitted, and its answer reaches the client untouched; a
// refusal or an error is the core's answer; the response's status reaches
// MiddlewareOptions.CountIf; an in-flight slot is held while next runs; Skip, Block
// and Safe; the field names as the core spells them; next gets the request
// that ratelimit.ResultFrom reads and ratelimit.Settle settles; the bytes
// of the response reach MiddlewareOptions.CountBytes. [RunKeys] tests an
// adapter's own key functions.
package adaptertest

import (
	"errors"
	"net/http"
	"testing"

	"github.com/tokenfair/ratelimit"
)

// NewHandler returns the handler of a framework's engine in which the
// adapter under test limits requests with l, keyed by key, configured by
// opts, in front of next. next must be reachable for every method and path.
// It may register cleanups with t.
type NewHandler func(t *testing.T, l *ratelimit.Limiter, key ratelimit.KeyFunc, opts *ratelimit.MiddlewareOptions, next http.Handler) http.Handler

// Run runs the conformance suite against the handlers made by newHandler.
func Run(t *testing.T, newHandler NewHandler) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, NewHandler)
	}{
		{"Admitted", testAdmitted},
		{"Refused", testRefused},
		{"Errors", testErrors},
		{"CustomHandlers", testCustomHandlers},
		{"CountIf", testCountIf},
		{"Aborted", testAborted},
		{"InFlight", testInFlight},
		{"Skip", testSkip},
		{"AddressLists", testAddressLists},
		{"FieldNames", testFieldNames},
		{"ResultFrom", testResultFrom},
		{"Settle", testSettle},
		{"CountBytes", testCountBytes},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newHandler) })
	}
}

const (
	keyHeader = "X-Client" // the request header field of the suite's key function
	keyError  = "error"    // the value of keyHeader that makes it fail
)

// key is the suite's key function: the X-Client field, ErrMissingKey
// without it, and an error (500) for keyError.
func key(r *http.Request) (string, error) {
	switch v := r.Header.Get(keyHeader); v {
	case "":
		return "", ratelimit.ErrMissingKey
	case keyError:
		return "", errors.New("adaptertest: key function failed")
	default:
		return "client:" + v, nil
	}
}
