// Package ratelimit limits how fast each client of an HTTP service may call
// it: exact token buckets, per-client keys, 429 answers with Retry-After,
// and the IETF RateLimit-Policy and RateLimit header fields.
//
// A [Limit] is a rate and a capacity; a [Policy] names it and picks an
// [Algorithm]; a [Store] keeps the buckets (memorystore, redisstore); a
// [Limiter] applies policies to keys; a [Middleware] does the HTTP part for
// every framework adapter (nethttp, ginlimit, echolimit). Decisions are
// exact integer arithmetic on nanoseconds (docs/algorithms.md), and a
// refused request spends nothing.
//
//	limiter, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(5).WithBurst(10)})
//	res, err := limiter.Take(ctx, key, 1)
//
// # Choosing a key
//
// Requests with the same key share a bucket. Prefer an identity the client
// cannot change at will: an API key ([KeyByAPIKey]) or an authenticated
// user ([KeyByContextValue]). The client IP ([KeyByIP]) is for anonymous
// traffic; keep its limits generous, as one address may be many users.
// [JoinKeyFuncs] combines keys. A request without identity is refused with
// [ErrMissingKey], never put in a shared bucket. docs/keys.md explains.
//
// # Running behind a proxy
//
// By default the client is the TCP peer: forwarding headers are ignored,
// since any client can send them. Behind proxies, list them in
// [IPOptions.TrustedProxies] and name their header in [IPOptions.Header]:
// [KeyByIP] then keys the address your outermost proxy saw, which a client
// cannot forge. Never trust 0.0.0.0/0. Behind Gin or Echo,
// ginlimit.KeyByClientIP and echolimit.KeyByRealIP use the framework's proxy
// settings. docs/keys.md#behind-a-proxy has the details.
package ratelimit
