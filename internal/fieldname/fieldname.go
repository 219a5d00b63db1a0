// Package fieldname is the one table of the rate-limit header fields'
// names: as the drafts spell them, as an http.Header keys them, and as
// gRPC metadata does. The root package writes the fields, pace reads
// them, and grpclimit turns them into metadata.
package fieldname

// Name is one field's name in each spelling.
type Name struct {
	Draft     string // as the drafts spell it: RateLimit-Policy
	Canonical string // as http.Header keys it (textproto): Ratelimit-Policy
	Metadata  string // as gRPC metadata keys it, in lower case: ratelimit-policy
}

// The fields of the IETF draft.
var (
	Policy = Name{"RateLimit-Policy", "Ratelimit-Policy", "ratelimit-policy"}
	Quota  = Name{"RateLimit", "Ratelimit", "ratelimit"}
)

// The positions in a family of the older fields.
const (
	Limit = iota
	Remaining
	Reset
)

// The older families, each its Limit, Remaining and Reset fields:
// RateLimit-* and X-RateLimit-*.
var (
	Legacy = [3]Name{
		{"RateLimit-Limit", "Ratelimit-Limit", "ratelimit-limit"},
		{"RateLimit-Remaining", "Ratelimit-Remaining", "ratelimit-remaining"},
		{"RateLimit-Reset", "Ratelimit-Reset", "ratelimit-reset"},
	}
	X = [3]Name{
		{"X-RateLimit-Limit", "X-Ratelimit-Limit", "x-ratelimit-limit"},
		{"X-RateLimit-Remaining", "X-Ratelimit-Remaining", "x-ratelimit-remaining"},
		{"X-RateLimit-Reset", "X-Ratelimit-Reset", "x-ratelimit-reset"},
	}
)

// All is every field: Policy, Quota, then the older families'.
var All = [...]Name{Policy, Quota, Legacy[0], Legacy[1], Legacy[2], X[0], X[1], X[2]}
