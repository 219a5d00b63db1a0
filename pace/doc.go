// Package pace is the client side of rate limiting: an http.RoundTripper
// that paces its requests to the limits a server declares in its answers,
// retries what the server refuses for a while, and never waits longer than
// it is allowed to.
//
//	client := &http.Client{Transport: pace.New(http.DefaultTransport, nil)}
//
// The [Transport] reads the IETF RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers, -07 to -11, and the spellings a
// pending revision adds), the older RateLimit-Limit, -Remaining and -Reset
// fields and their X-RateLimit-* spelling, and Retry-After. Once the quota
// of requests a server declared is spent, it holds requests back until the
// server said more comes; it shares that budget among every goroutine that
// uses it, per server, or per whatever [Options.Key] returns (an API key,
// say). A quota in another unit (content-bytes, tokens) holds requests
// only once it is spent. A 429 or 503 with Retry-After is retried after
// that wait when the request can be repeated. A wait longer than
// [Options.MaxWait], or past the request's deadline, fails at once with a
// [*WaitError] that names the wait and what asked for it. [Options.Limit]
// adds a limit of its own, with this module's Limiter.
//
// [Read], [ReadAll] and [RetryAfter] parse those fields on their own, for
// a program that only wants to know where it stands: Read returns the
// quota that binds the requests, ReadAll every quota, whatever its unit.
// Every field is parsed as a Structured Field (RFC 9651) where the drafts
// say so; a malformed, negative or contradictory field is ignored, never
// trusted into a negative or endless wait.
//
// docs/client.md says how the Transport paces, what it retries and never
// retries, and which header forms it reads.
package pace
