package ratelimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
)

// A scraper's network is blocked and the office network is never limited,
// behind a load balancer in 192.0.2.0/24 whose X-Forwarded-For is
// believed. The lists find the client as KeyByIP does, with the same
// IPOptions, also when the key is an API key.
func ExampleOptions_blockAndSafe() {
	store, _ := memorystore.New(nil)
	limiter, _ := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.Per(1, time.Minute)})
	proxies := &ratelimit.IPOptions{TrustedProxies: []string{"192.0.2.0/24"}}
	mw, err := ratelimit.NewMiddleware(limiter, ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{
		Block:    []string{"203.0.113.0/24"},
		Safe:     []string{"10.0.0.0/8"},
		ClientIP: proxies,
	})
	if err != nil {
		panic(err)
	}
	handler := nethttp.Wrap(mw)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	}))

	get := func(remoteAddr, xff string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remoteAddr
		r.Header.Set("X-API-Key", "demo")
		r.Header.Set("X-Forwarded-For", xff)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Printf("%-24q %d %q\n", xff, w.Code, w.Header()["RateLimit"])
	}
	// Through the load balancer.
	get("192.0.2.1:4000", "203.0.113.7")
	get("192.0.2.1:4000", "10.1.2.3")
	get("192.0.2.1:4000", "10.1.2.3")
	get("192.0.2.1:4000", "198.51.100.7")
	get("192.0.2.1:4000", "198.51.100.7")
	// A client prepends an office address: only the load balancer's entry counts.
	get("192.0.2.1:4000", "10.1.2.3, 203.0.113.7")
	// Directly, not through the load balancer: the header is not believed.
	get("203.0.113.7:5000", "10.1.2.3")
	_, err = ratelimit.NewMiddleware(limiter, ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{Block: []string{"203.0.113.0/33"}})
	fmt.Println(err)
	// Output:
	// "203.0.113.7"            403 []
	// "10.1.2.3"               200 []
	// "10.1.2.3"               200 []
	// "198.51.100.7"           200 ["\"default\";r=0;t=60"]
	// "198.51.100.7"           429 ["\"default\";r=0;t=60"]
	// "10.1.2.3, 203.0.113.7"  403 []
	// "10.1.2.3"               403 []
	// ratelimit: MiddlewareOptions.Block entry "203.0.113.0/33": want a CIDR prefix or an IP address
}
