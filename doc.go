// Package ratelimit limits how fast each client of an HTTP service may call
// it, with exact token buckets, per-client keys, 429 Too Many Requests
// answers with Retry-After, and the IETF RateLimit-Policy and RateLimit
// header fields.
//
// # The pieces
//
// A [Limit] is a rate and a capacity ([PerSecond](5).WithBurst(10)). A
// [Policy] gives a limit a name and an [Algorithm]. A [Store] keeps one bucket
// per policy and key and decides atomically; the memorystore package is the
// in-process store. A [Limiter] applies a policy to keys:
//
//	limiter, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerSecond(5).WithBurst(10)})
//	res, err := limiter.Take(ctx, key, 1)
//
// A [Middleware] does the HTTP part for every framework: it finds the key of
// a request with a [KeyFunc], takes a decision, writes the header fields and,
// on refusal, the 429 answer. The nethttp package plugs it into net/http.
//
// # Exactness
//
// The token bucket is implemented as GCRA on integer nanoseconds: a key's
// whole state is one int64, the time its bucket is full again, and every
// decision equals the one exact rational arithmetic would take for any rate
// whose interval is a whole number of nanoseconds. A refused request spends
// nothing. Time is read by the store, from one clock that tests replace.
//
// # Choosing a key
//
// Requests with the same key share a bucket, so the key decides what
// fairness means. The best key is an identity the client cannot change at
// will: an API key ([KeyByAPIKey], hashed so that stores never hold the
// secret) or an authenticated user ([KeyByContextValue]). The client IP
// ([KeyByIP]) is the fallback for anonymous traffic, with a caveat: behind
// NAT, carrier-grade NAT or a corporate proxy, one address is many users,
// who then share one bucket; and one user with an IPv6 /64 has billions of
// addresses unless they are grouped with [IPv6Prefix]. Combine keys with
// [JoinKeyFuncs] (route and client, say); its parts are length-prefixed so
// that no two combinations collide. A key function that finds no identity
// returns [ErrMissingKey]; an empty key is refused, never turned into one
// bucket shared by everyone.
//
// # Running behind a proxy
//
// By default the client is the TCP peer of the request (RemoteAddr), and
// X-Forwarded-For, Forwarded and X-Real-IP are ignored, because any client
// can send them. Behind load balancers or reverse proxies, list them with
// [TrustedProxies]. When the peer is trusted, the forwarding header (one,
// chosen with [ProxyHeader]) is read from the right, skipping trusted
// proxies; the first other address is the client. Addresses a client
// prepends itself are never reached, so they cannot buy a fresh bucket.
package ratelimit
