package ratelimit

import (
	"net/http"
	"time"
)

// HeaderFormat selects which rate-limit header fields a Middleware writes.
type HeaderFormat uint8

// Header formats.
const (
	HeadersIETF HeaderFormat = iota
	HeadersLegacy
	HeadersX
	HeadersNone
)

// STUB: replaced by the headers helper.
func writeHeaders(h http.Header, f HeaderFormat, res Result) {}

func retryAfterSeconds(d time.Duration) int64 { return 1 }
