package ratelimit

import (
	"net/http"
	"strconv"
	"time"
)

// HeaderFormat selects which rate-limit header fields a [Middleware] writes
// on every decided response. Every format writes its fields with Set
// semantics, so stacked middleware never duplicates a field. Retry-After is
// written on every refusal whatever the format.
//
// For a policy "default" of 5 tokens per second with a burst of 10, after one
// request:
//
//	HeadersIETF    RateLimit-Policy: "default";q=10;w=2
//	               RateLimit: "default";r=9;t=1
//	HeadersLegacy  RateLimit-Limit: 10
//	               RateLimit-Remaining: 9
//	               RateLimit-Reset: 1
//	HeadersX       X-RateLimit-Limit: 10
//	               X-RateLimit-Remaining: 9
//	               X-RateLimit-Reset: 1
//	HeadersNone    (nothing)
type HeaderFormat uint8

// Header formats.
const (
	// HeadersIETF writes RateLimit-Policy and RateLimit as Structured Field
	// Lists (RFC 9651) in the format of draft-ietf-httpapi-ratelimit-headers-10,
	// with the policy name as a quoted String:
	//
	//	RateLimit-Policy: "default";q=10;w=2
	//	RateLimit: "default";r=9;t=1
	//
	// q is the burst and w the time an empty bucket takes to fill, in seconds
	// rounded up (at least 1). r is the whole tokens remaining. t follows
	// draft -10, "the number of seconds until additional quota … is made
	// available", rounded up: on a refusal it is the time until the same
	// request would be allowed, the value of Retry-After, so Retry-After is
	// never earlier than t; on an allowed request it is the time until the
	// next token; when the bucket is full t is omitted.
	HeadersIETF HeaderFormat = iota
	// HeadersLegacy writes the three fields of the early drafts (-00 to -06),
	// still sent by Kong and express-rate-limit, with the reset as delta
	// seconds until the bucket is full (0 when it is full):
	//
	//	RateLimit-Limit: 10
	//	RateLimit-Remaining: 9
	//	RateLimit-Reset: 1
	HeadersLegacy
	// HeadersX writes the same values as HeadersLegacy under the X- names
	// that predate the drafts. The reset is delta seconds, as Envoy sends it,
	// not the Unix time that GitHub sends:
	//
	//	X-RateLimit-Limit: 10
	//	X-RateLimit-Remaining: 9
	//	X-RateLimit-Reset: 1
	HeadersX
	// HeadersNone writes no rate-limit header field. Retry-After is still
	// written on a refusal.
	HeadersNone
)

var headerFormatNames = [...]string{
	HeadersIETF:   "ietf",
	HeadersLegacy: "legacy",
	HeadersX:      "x",
	HeadersNone:   "none",
}

// String returns the format's name: "ietf", "legacy", "x" or "none".
func (f HeaderFormat) String() string {
	return enumString("HeaderFormat", headerFormatNames[:], uint8(f))
}

// MarshalText implements [encoding.TextMarshaler].
func (f HeaderFormat) MarshalText() ([]byte, error) {
	return enumMarshal("header format", headerFormatNames[:], uint8(f))
}

// UnmarshalText implements [encoding.TextUnmarshaler]; it accepts "ietf",
// "legacy", "x" and "none".
func (f *HeaderFormat) UnmarshalText(text []byte) error {
	return enumUnmarshal("header format", headerFormatNames[:], (*uint8)(f), text)
}

// Field names in the canonical form of textproto.CanonicalMIMEHeaderKey, so
// that assigning h[key] directly is the same as h.Set(key, v).
var (
	ietfKeys   = [...]string{"Ratelimit-Policy", "Ratelimit"}
	legacyKeys = [...]string{"Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset"}
	xKeys      = [...]string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}
)

// maxSFInteger is the largest Integer a Structured Field may carry (RFC 9651
// §3.3.1: at most 15 digits).
const maxSFInteger = 999_999_999_999_999

// writeHeaders sets the rate-limit header fields of format f that describe
// res, replacing any earlier value of those fields. policies is the
// RateLimit-Policy value of the limiter (see policyField), computed once. It
// writes nothing for HeadersNone or an unknown format.
//
// The values are appended to one stack buffer and converted to a single
// string, which they share as substrings; one []string backs every field,
// each field getting a one-element slice of it with capacity 1, so a later
// h.Add appends to a copy rather than over the next field. The map is
// assigned directly with the canonical names above, which is what h.Set does
// after canonicalising the name; h.Set would allocate a []string per field,
// and one more per field to canonicalise a spelling like "RateLimit-Policy".
func writeHeaders(h http.Header, f HeaderFormat, res Result, policies string) {
	var keys []string
	var ends [3]int
	ietf := false
	var buf [256]byte
	b := buf[:0]
	switch f {
	case HeadersIETF:
		keys = ietfKeys[1:]
		b = appendPolicyItem(b, res.Policy.Name)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, sfInteger(res.Remaining), 10)
		if t, ok := quotaSeconds(res); ok {
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, t, 10)
		}
		ends[0] = len(b)
		ietf = true
	case HeadersLegacy, HeadersX:
		keys = legacyKeys[:]
		if f == HeadersX {
			keys = xKeys[:]
		}
		b = strconv.AppendInt(b, res.Policy.Limit.burst, 10)
		ends[0] = len(b)
		b = strconv.AppendInt(b, max(res.Remaining, 0), 10)
		ends[1] = len(b)
		b = strconv.AppendInt(b, ceilSeconds(res.ResetAfter), 10)
		ends[2] = len(b)
	default:
		return
	}
	s := string(b)
	vals := make([]string, len(keys), len(keys)+1) // one allocation for every field's []string
	start := 0
	for i, key := range keys {
		vals[i] = s[start:ends[i]]
		start = ends[i]
		h[key] = vals[i : i+1 : i+1]
	}
	if ietf { // RateLimit-Policy too
		vals = append(vals, policies)
		h[ietfKeys[0]] = vals[len(keys):]
	}
}

// policyField returns the RateLimit-Policy value that lists ps (the
// dry-run ones only if withDryRun): "name";q=BURST;w=W items joined by
// commas.
func policyField(ps []Policy, withDryRun bool) string {
	var b []byte
	for _, p := range ps {
		if p.DryRun && !withDryRun {
			continue
		}
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = appendPolicyItem(b, p.Name)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, sfInteger(p.Limit.burst), 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, p.Limit.window(), 10)
	}
	return string(b)
}

// appendPolicyItem appends name as a Structured Field String. Policy names
// are validated to [A-Za-z0-9._-], so they need no escaping.
func appendPolicyItem(b []byte, name string) []byte {
	b = append(b, '"')
	b = append(b, name...)
	return append(b, '"')
}

// sfInteger clamps n to the non-negative Integers a Structured Field can
// carry.
func sfInteger(n int64) int64 { return min(max(n, 0), maxSFInteger) }

// quotaSeconds returns the t parameter of res and whether it is present: the
// seconds, rounded up, until additional quota is made available. On a
// refusal that is the time until the same request would be allowed, exactly
// the Retry-After value. When allowed, it is the time until the next token:
// ResetAfter modulo the interval, or a whole interval when the remainder is
// 0. A full bucket (ResetAfter 0) has no t.
func quotaSeconds(res Result) (int64, bool) {
	if !res.Allowed {
		return retryAfterSeconds(res.RetryAfter), true
	}
	if res.ResetAfter <= 0 {
		return 0, false
	}
	wait := res.ResetAfter
	if iv := res.Policy.Limit.interval; iv > 0 {
		if wait %= iv; wait == 0 {
			wait = iv
		}
	}
	return ceilSeconds(wait), true
}

// ceilSeconds returns d in whole seconds rounded up, or 0 when d is not
// positive. It cannot overflow.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// retryAfterSeconds returns the delay-seconds value of Retry-After for a
// wait of d: d rounded up to whole seconds, and at least 1, so a client never
// comes back before the request can be allowed.
func retryAfterSeconds(d time.Duration) int64 { return max(1, ceilSeconds(d)) }
