// Package ratelimit limits how fast each client of an HTTP service may call
// it, with exact token buckets, per-client keys, 429 answers with
// Retry-After, and the IETF RateLimit-Policy and RateLimit header fields.
//
// A [Limit] is a rate and a capacity ([PerSecond](5).WithBurst(10)); a
// [Policy] gives it a name and an [Algorithm]; a [Store] keeps the buckets
// (memorystore in process, redisstore shared); a [Limiter] applies policies
// to keys:
//
//	limiter, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(5).WithBurst(10)})
//	res, err := limiter.Take(ctx, key, 1)
//
// A [Middleware] does the HTTP part for every framework: it finds a
// request's key with a [KeyFunc], decides, writes the header fields and, on
// refusal, the 429 answer. The nethttp package plugs it into net/http.
// Decisions are exact integer arithmetic on nanoseconds, and a refused
// request spends nothing (docs/algorithms.md).
//
// # Choosing a key
//
// Requests with the same key share a bucket. Prefer an identity the client
// cannot change at will: an API key ([KeyByAPIKey], hashed so that stores
// never hold the secret) or an authenticated user ([KeyByContextValue]).
// The client IP ([KeyByIP]) is for anonymous traffic: behind NAT one
// address is many users, so keep IP limits generous; IPv6 clients are
// grouped by their /64. [JoinKeyFuncs] combines keys (route and client,
// say). A request without an identity, or with an empty key, is refused
// with [ErrMissingKey], never put in one shared bucket. docs/keys.md
// explains each choice.
//
// # Running behind a proxy
//
// By default the client is the TCP peer (RemoteAddr): X-Forwarded-For,
// Forwarded and X-Real-IP are ignored, since any client can send them.
// Behind proxies, list them in [IPOptions.TrustedProxies] and name their
// header in [IPOptions.Header]. [KeyByIP] then walks the header from the
// right, skipping trusted proxies, and keys the first address that is not
// one: the address your outermost proxy saw, which a client cannot forge by
// prepending entries. Never trust a range as wide as 0.0.0.0/0. Behind Gin
// or Echo, ginlimit.KeyByClientIP and echolimit.KeyByRealIP use the
// framework's own proxy settings. docs/keys.md#behind-a-proxy has the
// details.
package ratelimit
