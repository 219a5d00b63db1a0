package ratelimit_test

import (
	"fmt"
	"time"

	"github.com/tokenfair/ratelimit"
)

func ExampleLimit_String() {
	fmt.Println(ratelimit.PerSecond(5).WithBurst(10))
	fmt.Println(ratelimit.Per(10000, 24*time.Hour))
	fmt.Println(ratelimit.Per(2, 3*time.Second))
	fmt.Println(ratelimit.Per(1, 7*time.Second))
	fmt.Println(ratelimit.PerSecond(-5)) // invalid: written as the call
	// Output:
	// 5/s burst 10
	// 10000/d
	// 2/3s
	// 1/7s
	// PerSecond(-5) (invalid)
}
