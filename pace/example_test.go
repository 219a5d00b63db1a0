package pace_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
	"github.com/tokenfair/ratelimit/pace"
)

// A client of an API that allows 3 requests an hour: the fourth request
// would have to wait 20 minutes for the quota to refill, longer than the
// default MaxWait, so it fails at once, without being sent.
func ExampleNew() {
	store, _ := memorystore.New(nil)
	limiter, _ := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.Per(3, time.Hour)})
	mw, _ := ratelimit.NewMiddleware(limiter, ratelimit.KeyByAPIKey("X-API-Key"), nil)
	srv := httptest.NewServer(nethttp.Wrap(mw)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	defer srv.Close()

	client := &http.Client{Transport: pace.New(http.DefaultTransport, nil)}
	defer client.CloseIdleConnections()
	for range 4 {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("X-API-Key", "demo")
		resp, err := client.Do(req)
		var we *pace.WaitError
		if errors.As(err, &we) {
			fmt.Printf("not sent: it would wait %v, longer than %v\n", we.Wait.Round(time.Second), we.Max)
			continue
		}
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	// Output:
	// 200 "default";r=2;t=1200
	// 200 "default";r=1;t=1200
	// 200 "default";r=0;t=1200
	// not sent: it would wait 20m0s, longer than 1m0s
}

// The budget of each API key of each server, at most 30 s of waiting per
// request, and a limit of the client's own of 2 requests a second in
// bursts of 4, on top of what the servers declare.
func ExampleOptions() {
	client := &http.Client{Transport: pace.New(nil, &pace.Options{
		MaxWait: 30 * time.Second,
		Key:     func(r *http.Request) string { return r.URL.Host + " " + r.Header.Get("X-API-Key") },
		Limit:   ratelimit.PerSecond(2).WithBurst(4),
	})}
	_ = client
}

// The quota a response declares, in the IETF fields and as GitHub sends
// it, with its reset as a Unix time.
func ExampleRead() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ietf := http.Header{}
	ietf.Set("RateLimit-Policy", `"default";q=10;w=2`)
	ietf.Set("RateLimit", `"default";r=0;t=1`)
	q, ok := pace.Read(ietf, now)
	fmt.Printf("%v %+v\n", ok, q)

	github := http.Header{}
	github.Set("X-RateLimit-Limit", "5000")
	github.Set("X-RateLimit-Remaining", "4987")
	github.Set("X-RateLimit-Reset", fmt.Sprint(now.Add(42*time.Minute).Unix()))
	q, ok = pace.Read(github, now)
	fmt.Printf("%v %+v\n", ok, q)
	// Output:
	// true {Policy:default Remaining:0 Reset:1s Limit:10 Window:2s Unit:requests Partition: Cost:0}
	// true {Policy: Remaining:4987 Reset:42m0s Limit:5000 Window:0s Unit:requests Partition: Cost:0}
}

// Every quota a response declares, each in its own unit: the requests
// bind, not the 5 bytes left of the daily quota.
func ExampleReadAll() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	h := http.Header{}
	h.Set("RateLimit-Policy", `"rate";q=10;w=1, "daily-bytes";q=1000000;qu="content-bytes";w=86400`)
	h.Set("RateLimit", `"rate";r=9;t=1, "daily-bytes";r=5;t=3600`)
	for _, q := range pace.ReadAll(h, now) {
		fmt.Printf("%s: %d of %d %s left, more in %v\n", q.Policy, q.Remaining, q.Limit, q.Unit, q.Reset)
	}
	q, _ := pace.Read(h, now)
	fmt.Println("binds:", q.Policy)
	// Output:
	// rate: 9 of 10 requests left, more in 1s
	// daily-bytes: 5 of 1000000 content-bytes left, more in 1h0m0s
	// binds: rate
}

// Retry-After in seconds, or as an HTTP-date relative to the response's
// Date.
func ExampleRetryAfter() {
	h := http.Header{}
	h.Set("Date", "Mon, 05 Aug 2019 09:27:00 GMT")
	h.Set("Retry-After", "Mon, 05 Aug 2019 09:27:05 GMT")
	d, ok := pace.RetryAfter(h, time.Now())
	fmt.Println(d, ok)
	// Output:
	// 5s true
}
