package ratelimit

import (
	"errors"
	"strconv"
	"sync"
	"time"
)

// InFlightPolicyName names the concurrency limit of WithMaxInFlight in
// header fields and problem bodies.
const InFlightPolicyName = "inflight"

// WithMaxInFlight limits how many requests run at once: at most perKey of
// one key and at most total in all (0 for no limit of that kind). A request
// over either limit is refused with 429, Retry-After: 1 and the policy
// "inflight", and what it took from the rate limits is given back. A slot is
// released when the handler returns, also by a panic or because the client
// went away. The limit is kept in the process: with several instances, each
// allows its own N. The default is no limit.
//
// In the IETF format, the limit is listed in RateLimit-Policy with the
// draft's concurrency unit: "inflight";q=3;qu="concurrent-requests".
func WithMaxInFlight(perKey, total int) Option {
	return func(c *config) error {
		if perKey < 0 || total < 0 || perKey == 0 && total == 0 {
			return errors.New("ratelimit: WithMaxInFlight: want a positive limit per key, in total, or both")
		}
		q := perKey
		if q == 0 || total > 0 && total < q {
			q = total
		}
		c.inflight = &inflight{perKey: perKey, total: total, running: map[string]int{},
			item: `"` + InFlightPolicyName + `";q=` + strconv.Itoa(q) + `;qu="concurrent-requests"`,
			refused: Result{
				Policy:     InFlightPolicyName,
				Limit:      Limit{Interval: time.Second, Burst: int64(q)},
				RetryAfter: time.Second,
				ResetAfter: time.Second,
				Violated:   []string{InFlightPolicyName},
			}}
		return nil
	}
}

// inflight counts the requests running, per key and in all.
type inflight struct {
	perKey, total int
	item          string // the RateLimit-Policy item
	refused       Result // what a refusal reports

	mu      sync.Mutex
	running map[string]int
	all     int
}

// acquire takes a slot for key, if one is free.
func (f *inflight) acquire(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.total > 0 && f.all >= f.total || f.perKey > 0 && f.running[key] >= f.perKey {
		return false
	}
	f.all++
	f.running[key]++
	return true
}

// release gives key's slot back.
func (f *inflight) release(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.all--
	if n := f.running[key] - 1; n > 0 {
		f.running[key] = n
	} else {
		delete(f.running, key)
	}
}

// list adds the concurrency limit to RateLimit-Policy, as a second field
// line of the same List (RFC 9651 §3.1), in the IETF format.
func (f *inflight) list(h map[string][]string, format HeaderFormat) {
	if format == HeadersIETF {
		h[ietfKeys[0]] = append(h[ietfKeys[0]][:1:1], f.item)
	}
}
