// Package xrate_test puts golang.org/x/time/rate behind the middleware: any
// limiter can decide for it through the ratelimit.Store interface.
package xrate_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/nethttp"
)

// xrateStore is a ratelimit.Store of one *rate.Limiter per policy and key.
//
// What it gives up against memorystore and redisstore: exactness (rate
// keeps tokens as a float64, so decisions drift from the exact bucket's by
// rounding), sharing (each instance has its own limiters, so N instances
// admit N times the limit), bounded memory (a limiter is never forgotten),
// and the optional stores: no give-backs (RefundStore), no Reset, no atomic
// batch of several policies. It knows only the token bucket, so it refuses
// to decide a shaping policy or a penalty box's ban, whose state is no
// token count, a calendar quota (ratelimit.Daily, Monthly), whose tokens
// come back at a fixed time, and a charge past empty (Limiter.Settle).
type xrateStore struct {
	mu  sync.Mutex
	lim map[bucket]*rate.Limiter
}

type bucket struct{ policy, key string }

func (s *xrateStore) Take(_ context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	if p.Algorithm != ratelimit.TokenBucket && p.Algorithm != ratelimit.LeakyPolice {
		alg, _ := p.Algorithm.MarshalText()
		return ratelimit.Result{}, fmt.Errorf("xrateStore: policy %q: only token buckets, not %s", p.Name, alg)
	}
	if p.Limit.Interval() == 0 {
		return ratelimit.Result{}, fmt.Errorf("xrateStore: policy %q: only rates, not the calendar quota %v", p.Name, p.Limit)
	}
	s.mu.Lock()
	l := s.lim[bucket{p.Name, key}]
	if l == nil {
		l = rate.NewLimiter(rate.Every(p.Limit.Interval()), int(p.Limit.Burst()))
		s.lim[bucket{p.Name, key}] = l
	}
	s.mu.Unlock()

	now := time.Now()
	r := l.ReserveN(now, int(cost)) // the Limiter never asks for more than the burst
	res := ratelimit.Result{Allowed: true}
	if wait := r.DelayFrom(now); wait > 0 {
		r.CancelAt(now) // a refused request spends nothing
		res = ratelimit.Result{RetryAfter: wait}
	}
	tokens := l.TokensAt(now)
	res.Remaining = int64(max(tokens, 0))
	res.ResetAfter = time.Duration((float64(p.Limit.Burst()) - tokens) * float64(p.Limit.Interval()))
	return res, nil
}

func Example() {
	store := &xrateStore{lim: make(map[bucket]*rate.Limiter)}
	limiter, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.Per(2, time.Minute)})
	if err != nil {
		panic(err)
	}
	mw, err := ratelimit.NewMiddleware(limiter, ratelimit.KeyByAPIKey("X-API-Key"), nil)
	if err != nil {
		panic(err)
	}
	handler := nethttp.Wrap(mw)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for range 3 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", "demo")
		handler.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header()["Retry-After"])
	}
	// Output:
	// 200 []
	// 200 []
	// 429 [30]
}
