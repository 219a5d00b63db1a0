package ratelimit

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tokenfair/ratelimit/internal/algo"
)

// Algorithm selects how a [Policy] applies its [Limit]; the zero value is
// TokenBucket. Its text forms ("token-bucket", "leaky-police",
// "leaky-shape") let flag.TextVar and configuration files take it.
type Algorithm uint8

const (
	// TokenBucket allows bursts up to the burst and refills continuously;
	// a new key starts full.
	TokenBucket Algorithm = iota
	// LeakyPolice, the leaky bucket as a meter, decides as TokenBucket does.
	LeakyPolice
	// LeakyShape is the leaky bucket as a queue: a key's requests leave at
	// a constant rate, each waiting its turn (Result.Delay); one whose wait
	// would exceed burst × interval or Policy.MaxDelay is refused at once.
	LeakyShape
)

// The Algorithms of the Limiter's own buckets, which no Policy of yours may
// have: a penalty box's ban, and its strikes and bans-backoff token
// buckets; and a settlement's charge past empty.
const (
	ban     Algorithm = algo.Ban
	strikes Algorithm = algo.Strikes
	debt    Algorithm = algo.Debt // a settlement's charge past empty
)

var algorithmNames = [...]string{TokenBucket: "token-bucket", LeakyPolice: "leaky-police", LeakyShape: "leaky-shape", ban: "ban", strikes: "strikes", debt: "debt"}

// name returns a's name, such as "token-bucket".
func (a Algorithm) name() string { return enumName("Algorithm", algorithmNames[:], uint8(a)) }

// MarshalText implements [encoding.TextMarshaler].
func (a Algorithm) MarshalText() ([]byte, error) {
	return enumMarshal("algorithm", algorithmNames[:], uint8(a))
}

// UnmarshalText implements [encoding.TextUnmarshaler].
func (a *Algorithm) UnmarshalText(text []byte) error {
	return enumUnmarshal("algorithm", algorithmNames[:ban], (*uint8)(a), text) // no penalty box's own
}

func enumName(typ string, names []string, v uint8) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

func enumMarshal(what string, names []string, v uint8) ([]byte, error) {
	if int(v) < len(names) {
		return []byte(names[v]), nil
	}
	return nil, fmt.Errorf("ratelimit: unknown %s %d", what, v)
}

func enumUnmarshal(what string, names []string, v *uint8, text []byte) error {
	for i, name := range names {
		if name == string(text) {
			*v = uint8(i)
			return nil
		}
	}
	return fmt.Errorf("ratelimit: unknown %s %q: want one of %q", what, text, names)
}

// Policy is a named limit enforced by an algorithm. The zero Policy has no
// valid Limit.
type Policy struct {
	// Name identifies the policy in header fields, problem bodies and
	// store keys: 1 to 64 of [A-Za-z0-9._-]. Default: "default".
	Name string
	// Limit is the rate and capacity, counted in Unit.
	Limit Limit
	// Unit is what the policy counts, 1 to 64 of [a-z0-9._-] starting with
	// a letter: "requests" (the default), "content-bytes" (response bodies,
	// settled once complete) or the application's, such as "tokens"
	// (reserved by MiddlewareOptions.Costs, settled by Settle).
	Unit string
	// LimitFor, if set, gives each key (as Take gets it) its own limit,
	// read at every decision; where it returns false, Limit applies. It
	// must be fast and safe for concurrent use. docs/policies.md shows a
	// plan table, and what a changed limit does to a bucket.
	LimitFor func(key string) (Limit, bool)
	// Algorithm is how Limit is applied. The zero value is TokenBucket.
	Algorithm Algorithm
	// Immediate, for LeakyShape, lets the first Immediate queued requests
	// of cost 1 proceed at once (nginx's delay=N), admitting no more.
	// Default: 0, every queued request waits.
	Immediate int64
	// MaxDelay, for LeakyShape, refuses at once a request that would wait
	// longer. Default: 0, only the queue's room bounds the wait.
	MaxDelay time.Duration
	// Global makes the policy one bucket shared by every key: a capacity
	// for the whole service. Default: a bucket per key.
	Global bool
	// DryRun makes the policy decide and count but never refuse; its
	// refusals show in Result.Results. Default: enforced.
	DryRun bool
	// Penalty bans a key that the policy keeps refusing. Default: none.
	Penalty Penalty

	period *periodCache // a calendar quota's, once New has checked it
}

// periodCache keeps the last period a calendar quota's decisions found,
// so that the decisions within it need not find it again (a zone's
// changes of clock make finding it cost some hundred nanoseconds). The
// copies of a policy share it. It is safe for concurrent use.
type periodCache struct{ last atomic.Pointer[period] }

// period is a calendar period of a quota in a zone, in Unix nanoseconds.
type period struct {
	start, end int64
	cal        calendar
	loc        *time.Location
}

// quotaEnd returns the end of the calendar period of p's quota that holds
// now, in Unix nanoseconds.
func (p *Policy) quotaEnd(now int64) int64 {
	c := p.period
	if c == nil {
		return p.Limit.periodEnd(now)
	}
	if q := c.last.Load(); q != nil && q.start <= now && now < q.end && q.cal == p.Limit.cal && q.loc == p.Limit.loc {
		return q.end
	}
	start, end := p.Limit.Period(time.Unix(0, now))
	c.last.Store(&period{start.UnixNano(), end.UnixNano(), p.Limit.cal, p.Limit.loc})
	return end.UnixNano()
}

// The units of the IETF draft's registry that a Policy may count.
const (
	requests     = "requests"      // the default: a request costs 1, or MiddlewareOptions.Cost
	contentBytes = "content-bytes" // the bytes of response bodies
)

// globalKey is the key under which a Global policy keeps its one bucket.
const globalKey = "*"

// validate returns p with its defaults filled in, or why it cannot be used.
func (p Policy) validate() (Policy, error) {
	if p.Name == "" {
		p.Name = "default"
	}
	if p.Unit == "" {
		p.Unit = requests
	}
	if !validName(p.Name) {
		return p, fmt.Errorf("ratelimit: policy name %q: want 1 to 64 characters from [A-Za-z0-9._-]", p.Name)
	}
	if !validUnit(p.Unit) {
		return p, fmt.Errorf("ratelimit: policy %q: unit %q: want 1 to 64 characters from [a-z0-9._-], starting with a letter", p.Name, p.Unit)
	}
	if int(p.Algorithm) >= len(algorithmNames) {
		return p, fmt.Errorf("ratelimit: policy %q: unknown algorithm %d", p.Name, p.Algorithm)
	}
	switch p.Algorithm {
	case ban, strikes:
		return p, fmt.Errorf("ratelimit: policy %q: the algorithm %s is a penalty box's own; set Policy.Penalty", p.Name, p.Algorithm.name())
	case debt:
		return p, fmt.Errorf("ratelimit: policy %q: the algorithm %s is a settlement's own (Limiter.Settle)", p.Name, p.Algorithm.name())
	}
	if err := p.Penalty.validate(&p); err != nil {
		return p, fmt.Errorf("ratelimit: policy %q: %w", p.Name, err)
	}
	if p.LimitFor != nil && p.Global {
		return p, fmt.Errorf("ratelimit: policy %q: LimitFor with Global: a global policy has one bucket, not one per key", p.Name)
	}
	if err := p.checkLimit(p.Limit); err != nil {
		return p, fmt.Errorf("ratelimit: policy %q: %w", p.Name, err)
	}
	p.period = nil
	if p.Limit.cal != rate {
		p.period = new(periodCache)
	}
	return p, nil
}

// checkLimit reports why p cannot apply l, its Limit or one LimitFor gave.
func (p *Policy) checkLimit(l Limit) error {
	if err := l.validate(); err != nil {
		return err
	}
	switch {
	case l.cal != p.Limit.cal:
		return fmt.Errorf("LimitFor gave %v, a %s, where Limit is a %s", l, calendars[l.cal].kind, calendars[p.Limit.cal].kind)
	case l.cal != rate && !sameZone(l.loc, p.Limit.loc):
		return fmt.Errorf("LimitFor gave %v, in another time zone than Limit's %s: a quota's periods must not move", l, p.Limit.loc)
	case l.cal != rate && p.Algorithm != TokenBucket:
		return fmt.Errorf("a calendar quota is a TokenBucket's, not a %s's", p.Algorithm.name())
	case p.Algorithm != LeakyShape && (p.Immediate != 0 || p.MaxDelay != 0):
		return fmt.Errorf("Immediate and MaxDelay apply to %s only", LeakyShape.name())
	case p.Immediate < 0 || p.Immediate > l.burst:
		return fmt.Errorf("Immediate %d outside [0, burst %d]", p.Immediate, l.burst)
	case p.MaxDelay < 0 || p.MaxDelay > l.span():
		return fmt.Errorf("MaxDelay %v outside [0, %v]", p.MaxDelay, l.span())
	}
	return nil
}

// sameZone reports whether a and b are one time zone: one Location, or
// two of one name (loaded twice) whose clocks agree in winter and summer
// over the years, unlike a FixedZone that takes another's name.
func sameZone(a, b *time.Location) bool {
	if a == b {
		return true
	}
	if a.String() != b.String() {
		return false
	}
	for year := 1970; year <= 2070; year += 10 {
		for _, m := range []time.Month{time.January, time.July} {
			t := time.Date(year, m, 15, 12, 0, 0, 0, time.UTC)
			_, x := t.In(a).Zone()
			_, y := t.In(b).Zone()
			if x != y {
				return false
			}
		}
	}
	return true
}

func validName(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validUnit reports whether s may name a Policy's Unit: a lower-case
// letter, then up to 63 of [a-z0-9._-], so that it is a Structured Field
// String without escapes.
func validUnit(s string) bool {
	if len(s) < 1 || len(s) > 64 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
