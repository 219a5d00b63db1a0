package ratelimit_test

import (
	"flag"
	"fmt"

	"github.com/tokenfair/ratelimit"
)

// Algorithm and HeaderFormat are text values: flag.TextVar and
// configuration files take them by name.
func ExampleAlgorithm_flag() {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	var algo ratelimit.Algorithm
	var headers ratelimit.HeaderFormat
	fs.TextVar(&algo, "algorithm", ratelimit.TokenBucket, "token-bucket, leaky-police or leaky-shape")
	fs.TextVar(&headers, "headers", ratelimit.HeadersIETF, "ietf, legacy, x or none")
	if err := fs.Parse([]string{"-algorithm=leaky-shape", "-headers", "legacy"}); err != nil {
		panic(err)
	}
	a, _ := algo.MarshalText()
	h, _ := headers.MarshalText()
	fmt.Println(string(a), string(h))

	err := algo.UnmarshalText([]byte("sliding-window"))
	fmt.Println(err)
	// Output:
	// leaky-shape legacy
	// ratelimit: unknown algorithm "sliding-window": want one of ["token-bucket" "leaky-police" "leaky-shape"]
}
