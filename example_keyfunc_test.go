package ratelimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/tokenfair/ratelimit"
)

func ExampleKeyByIP() {
	// The load balancers live in 10.0.0.0/8 and append the address they
	// saw to X-Forwarded-For (the default Header).
	key, err := ratelimit.KeyByIP(&ratelimit.IPOptions{
		TrustedProxies: []string{"10.0.0.0/8"},
		IPv6Prefix:     64,
	})
	if err != nil {
		panic(err)
	}
	request := func(remoteAddr, xff string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remoteAddr
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		k, err := key(r)
		fmt.Printf("%-22s %-32q -> %s %v\n", remoteAddr, xff, k, err)
	}
	// Through the load balancer: the rightmost untrusted entry is the client;
	// the client-supplied 1.2.3.4 on the left is ignored.
	request("10.0.0.5:41000", "1.2.3.4, 198.51.100.7, 10.0.0.1")
	// Directly from the Internet: the header is a lie and is ignored.
	request("203.0.113.9:52000", "1.2.3.4")
	// IPv6 clients are grouped by /64.
	request("[2001:db8:1:2::99]:443", "")
	// Output:
	// 10.0.0.5:41000         "1.2.3.4, 198.51.100.7, 10.0.0.1" -> ip:198.51.100.7 <nil>
	// 203.0.113.9:52000      "1.2.3.4"                        -> ip:203.0.113.9 <nil>
	// [2001:db8:1:2::99]:443 ""                               -> ip:2001:db8:1:2::/64 <nil>
}

func ExampleIPOptions() {
	// A comma-separated flag such as -trusted-proxies="" gives no proxies.
	flag := ""
	_, err := ratelimit.KeyByIP(&ratelimit.IPOptions{TrustedProxies: strings.Split(flag, ",")})
	fmt.Println(err)
	_, err = ratelimit.KeyByIP(&ratelimit.IPOptions{TrustedProxies: []string{"10.0.0.0/8", "proxy.internal"}})
	fmt.Println(err)
	// Output:
	// <nil>
	// ratelimit: KeyByIP: TrustedProxies entry "proxy.internal": want a CIDR prefix or an IP address
}

func ExampleKeyByAPIKey() {
	key := ratelimit.KeyByAPIKey("X-API-Key")
	const secret = "sk_live_0123456789abcdef"
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-API-Key", secret)
	k, err := key(r)
	fmt.Println(k, err)
	fmt.Println("holds the secret:", strings.Contains(k, secret))

	_, err = key(httptest.NewRequest(http.MethodGet, "/", nil))
	fmt.Println(err)
	// Output:
	// ak:NC4g3sUZVW_P1I9UN-BTHw <nil>
	// holds the secret: false
	// ratelimit: missing key: the request carries no X-API-Key header
}

func ExampleJoinKeyFuncs() {
	ip, err := ratelimit.KeyByIP(nil)
	if err != nil {
		panic(err)
	}
	route := func(r *http.Request) (string, error) { return r.Method + " " + r.URL.Path, nil }
	key := ratelimit.JoinKeyFuncs(route, ip) // one bucket per route and client

	r := httptest.NewRequest(http.MethodGet, "/v1/geocode", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	fmt.Println(key(r))
	// Output:
	// 15:GET /v1/geocode12:ip:192.0.2.1 <nil>
}
