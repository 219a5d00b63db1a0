package main

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

// The limits of the admin endpoint's failed tokens. Each client address
// (as -key ip finds it, behind -trusted-proxies too) may fail 5 times a
// minute, and all clients together 60 times a minute: a bearer token cannot
// be guessed at that pace, and an operator who mistypes it waits at most
// 12 s for the next try. While a client's bucket, or the global one, is
// empty, every admin request it sends is refused with 429, the right token
// included: otherwise a 204 among the 429s would tell a guesser it had won.
var (
	adminFailuresPerClient = ratelimit.Per(5, time.Minute)
	adminFailuresInAll     = ratelimit.Per(60, time.Minute)
)

// adminLogEvery is the interval at which failed admin tokens are logged:
// the first of an interval is, the others are counted in the next line.
const adminLogEvery = time.Minute

// adminGuard limits the admin endpoint's failed tokens and logs them once
// per interval. Its buckets live in memory, apart from the API's, even with
// -store redis: each instance limits its own admin endpoint.
type adminGuard struct {
	failures *ratelimit.Limiter
	client   ratelimit.KeyFunc // the client's address, as KeyByIP finds it
	log      *failureLog
}

// newAdminGuard returns the guard of the admin endpoint, whose time source
// is clock (nil: the system's) and whose clients are found by client.
func newAdminGuard(clock func() time.Time, client ratelimit.KeyFunc, logger *slog.Logger) (*adminGuard, error) {
	store, err := memorystore.New(&memorystore.Options{Clock: clock, MaxKeys: 1 << 16})
	if err != nil {
		return nil, err
	}
	failures, err := ratelimit.New(store,
		ratelimit.Policy{Name: "admin-failures", Limit: adminFailuresPerClient},
		ratelimit.Policy{Name: "admin-failures-global", Limit: adminFailuresInAll, Global: true})
	if err != nil {
		return nil, err
	}
	if clock == nil {
		clock = time.Now
	}
	return &adminGuard{failures: failures, client: client, log: &failureLog{logger: logger, now: clock, every: adminLogEvery}}, nil
}

// clientOf returns r's client address as the limiter's key, or the raw
// RemoteAddr when it is unusable, so that such requests share a bucket.
func (g *adminGuard) clientOf(r *http.Request) string {
	if key, err := g.client(r); err == nil {
		return key
	}
	return "unusable:" + r.RemoteAddr
}

// wait returns how long client must wait before its next admin request may
// be answered, or 0 when it may be now: while its bucket of failures, or
// the global one, is empty.
func (g *adminGuard) wait(ctx context.Context, client string) time.Duration {
	res, err := g.failures.Take(ctx, client, 0)
	if err != nil { // a memory store does not fail; refuse rather than guess
		return time.Second
	}
	var wait time.Duration
	for _, p := range res.Results {
		if p.Remaining < 1 {
			l := p.Policy.Limit
			// The time until one token is back: the bucket's refill,
			// less the refill of the burst's other tokens.
			wait = max(wait, p.ResetAfter-time.Duration(l.Burst()-1)*l.Interval())
		}
	}
	return wait
}

// fail counts a failed token of client, and returns how long it must wait
// when that spent the last failure its bucket, or the global one, allowed.
func (g *adminGuard) fail(ctx context.Context, client string) time.Duration {
	res, err := g.failures.Take(ctx, client, 1)
	switch {
	case err != nil:
		return time.Second
	case !res.Allowed:
		return res.RetryAfter
	}
	return 0
}

// refuse answers a limited admin request: 429 with Retry-After, the wait
// in seconds rounded up, at least 1.
func refuseAdmin(w http.ResponseWriter, wait time.Duration) {
	secs := max(1, int64((wait+time.Second-1)/time.Second))
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	writeProblem(w, http.StatusTooManyRequests, "too many failed admin tokens; try again later")
}

// failureLog logs failed admin tokens at most once per interval: the first
// failure of an interval writes a warning with the number of failures left
// unlogged since the last one, the others are only counted.
type failureLog struct {
	logger *slog.Logger
	now    func() time.Time
	every  time.Duration

	mu       sync.Mutex
	next     time.Time // when the next line may be written
	unlogged int64     // failures since the last line
}

// failed records a failed admin request from client, refused (429) or
// not (401).
func (f *failureLog) failed(client string, limited bool) {
	now := f.now()
	f.mu.Lock()
	if now.Before(f.next) {
		f.unlogged++
		f.mu.Unlock()
		return
	}
	unlogged := f.unlogged
	f.next, f.unlogged = now.Add(f.every), 0
	f.mu.Unlock()
	f.logger.Warn("geocoding: admin request without the admin token", "client", client, "limited", limited,
		"unlogged_since_last", unlogged, "next_log_after", f.every)
}
