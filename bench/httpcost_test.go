package bench

import (
	"net/http"
	"testing"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/nethttp"
)

// BenchmarkHTTPCost takes HTTP/tokenfair apart, to show where the time over
// the bare handler goes, with the same requests and recorder as
// BenchmarkHTTP:
//
//   - none: the bare handler;
//   - fields: no limiter, the two IETF header fields written with values
//     shared by every request (what writing them costs in this harness,
//     whose recorder clones the header map);
//   - one-key: the middleware, every request under one key, no fields;
//   - keys: the middleware, the 1 000 clients' keys made in advance, no
//     fields (the decision on 1 000 buckets, without finding the key);
//   - by-ip: keyed by KeyByIP, no fields;
//   - by-ip-fields: keyed by KeyByIP with the IETF fields, which is
//     HTTP/tokenfair.
func BenchmarkHTTPCost(b *testing.B) {
	rs := clients(1000)
	byIP, err := ratelimit.KeyByIP(nil)
	if err != nil {
		b.Fatal(err)
	}
	keys := make(map[*http.Request]string, len(rs))
	for _, r := range rs {
		keys[r] = "ip:" + r.RemoteAddr
	}
	// ahead returns the key made in advance; the map lookup is the
	// least a key function does.
	ahead := func(r *http.Request) (string, error) { return keys[r], nil }
	oneKey := func(*http.Request) (string, error) { return "everyone", nil }
	middleware := func(key ratelimit.KeyFunc, f ratelimit.HeaderFormat) http.Handler {
		lim, _ := tokenfairLimiter(b, allowAll)
		// The one-key warning is off: one-key means it.
		mw, err := ratelimit.NewMiddleware(lim, key, &ratelimit.MiddlewareOptions{Headers: f, Quiet: true})
		if err != nil {
			b.Fatal(err)
		}
		return nethttp.Wrap(mw)(okHandler)
	}
	policy, quota := []string{`"bench";q=1000000000;w=3600`}, []string{`"bench";r=999999999;t=1`}
	steps := []struct {
		name string
		h    http.Handler
	}{
		{"none", okHandler},
		{"fields", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h["RateLimit"] = quota
			h["RateLimit-Policy"] = policy
			okHandler.ServeHTTP(w, r)
		})},
		{"one-key", middleware(oneKey, ratelimit.HeadersNone)},
		{"keys", middleware(ahead, ratelimit.HeadersNone)},
		{"by-ip", middleware(byIP, ratelimit.HeadersNone)},
		{"by-ip-fields", middleware(byIP, ratelimit.HeadersIETF)},
	}
	for _, s := range steps {
		b.Run(s.name, func(b *testing.B) { serveAll(b, s.h, rs) })
	}
}
