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
// addresses, so IPv6 clients are keyed by their /64 ([IPOptions.IPv6Prefix]
// chooses another length). So when
// requests carry an identity, prefer it, and keep IP limits, generous
// ones, for anonymous traffic. Combine keys with [JoinKeyFuncs] (route and
// client, say); its parts are length-prefixed so that no two combinations
// collide. A key function that finds no identity
// returns [ErrMissingKey]; an empty key is refused, never turned into one
// bucket shared by everyone.
//
// # Running behind a proxy
//
// By default the client is the TCP peer of the request (RemoteAddr), and
// X-Forwarded-For, Forwarded and X-Real-IP are ignored, because any client
// can send them: believing them would let everybody pick its own key.
// Behind load balancers or reverse proxies the peer is the proxy, so every
// client would share its bucket (KeyByIP logs a warning the first time it
// sees forwarding headers while no proxy is trusted). List the proxies in
// [IPOptions.TrustedProxies], and name the header they set in
// [IPOptions.Header]. The header is read only when the peer is one of them.
//
// Each proxy appends the address it received the request from to the right
// of X-Forwarded-For or Forwarded, while everything to the left of the
// first entry written by one of your proxies came from the client and may
// be forged. So [KeyByIP] walks the list from the right, skips the
// addresses of trusted proxies, and takes the first one that is not
// trusted: the address that your outermost proxy saw. The leftmost entry,
// which some libraries use, is whatever the client wants it to be, so
// addresses a client prepends itself are never reached and cannot buy a
// fresh bucket. When every entry is trusted the client is the leftmost
// one, and when the header is absent, the peer. At most 32 entries are
// examined, and an entry reached by the walk that is not an address (such
// as "unknown"), or that names no client (empty, or a Forwarded element
// without for=), is an error, never a key. Never trust a range as wide as
// 0.0.0.0/0: a client inside it can forge its address (KeyByIP logs a
// warning).
//
// Behind Gin or Echo, the framework finds the client address with its own
// proxy settings; ginlimit.KeyByClientIP and echolimit.KeyByRealIP key it
// as KeyByIP would, and the TCP peer while the framework trusts every
// proxy by default (gin.New(), an Echo without IPExtractor).
package ratelimit
