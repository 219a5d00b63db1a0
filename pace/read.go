package pace

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// Quota is what a response declares of one limit: how much of it is left,
// when more comes, and, where the response says, the whole quota and its
// window. [Read] returns it.
type Quota struct {
	// Policy is the policy's name in the IETF fields; "" in the forms that
	// name none.
	Policy string
	// Remaining is the quota units left (r, remaining, *-Remaining).
	Remaining int64
	// Reset is how long until more quota is made available (t, reset,
	// *-Reset); 0 when the response does not say.
	Reset time.Duration
	// Limit is the quota (q, limit, *-Limit); 0 when the response does not
	// say.
	Limit int64
	// Window is the time the quota is granted for (w); 0 when the response
	// does not say.
	Window time.Duration
	// Unit is what the quota counts (qu): "requests" unless the response
	// says "content-bytes" or "concurrent-requests".
	Unit string
	// Partition is the partition key the quota belongs to (pk, decoded);
	// "" when none.
	Partition string
}

// A field's name as http.Header canonicalises it, and as the drafts spell
// it, which a handler in the same process may have set directly (this
// module's middleware does): Read looks for both.
type field struct{ canonical, draft string }

var (
	rateLimitField = field{"Ratelimit", "RateLimit"}
	policyField    = field{"Ratelimit-Policy", "RateLimit-Policy"}
	// The older families: RateLimit-* and X-RateLimit-*.
	families = [...][3]field{
		{{"Ratelimit-Remaining", "RateLimit-Remaining"}, {"Ratelimit-Limit", "RateLimit-Limit"}, {"Ratelimit-Reset", "RateLimit-Reset"}},
		{{"X-Ratelimit-Remaining", "X-RateLimit-Remaining"}, {"X-Ratelimit-Limit", "X-RateLimit-Limit"}, {"X-Ratelimit-Reset", "X-RateLimit-Reset"}},
	}
)

// lines returns the field lines of f in h, in either spelling.
func lines(h http.Header, f field) []string {
	v := h[f.canonical]
	if w := h[f.draft]; len(w) > 0 {
		v = append(v[:len(v):len(v)], w...)
	}
	return v
}

// value returns the field lines of f in h as one value, and false when
// there is none or it is longer than the parser takes.
func value(h http.Header, f field) (string, bool) {
	v, ok := joinLines(lines(h, f))
	return v, ok && v != ""
}

// Read returns the quota that the header fields h of a response declare,
// received at now, and whether they declare one: how much is left, which
// every form but RateLimit-Policy alone says. It reads, in this order, the
// first form present and well-formed:
//
//   - the IETF draft's RateLimit (-08 to -11: `"default";r=9;t=1`, a
//     Structured Field List), with RateLimit-Policy for the quota and
//     window of the policy it names; of several items, the one with the
//     fewest units left (of those, the longest Reset);
//   - the draft-07 RateLimit dictionary (`limit=10, remaining=9, reset=1`);
//   - RateLimit-Remaining, RateLimit-Limit and RateLimit-Reset;
//   - X-RateLimit-Remaining, X-RateLimit-Limit and X-RateLimit-Reset.
//
// Each field is parsed as RFC 9651 requires; a malformed or negative one
// is ignored, as are two lines of a field that holds one value. The resets
// of the last two forms are delta seconds, or Unix times when at least
// 10⁹ (no server sends a delta of 31 years), as GitHub sends them: a Unix
// time is taken relative to the response's Date field (else now) and
// ignored when more than a year away from it. docs/client.md shows each
// form.
func Read(h http.Header, now time.Time) (Quota, bool) {
	if v, ok := value(h, rateLimitField); ok {
		if q, ok := readServiceLimits(h, v); ok {
			return q, true
		}
		if q, ok := readDraft07(h, v); ok {
			return q, true
		}
	}
	for _, f := range families {
		if q, ok := readFamily(h, f, now); ok {
			return q, true
		}
	}
	return Quota{}, false
}

// readServiceLimits reads v, the value of RateLimit, as the List of the
// drafts -08 to -11.
func readServiceLimits(h http.Header, v string) (Quota, bool) {
	items, ok := parseList(v)
	if !ok {
		return Quota{}, false
	}
	var q Quota
	found := false
	for i := range items {
		it, ok := serviceLimit(&items[i])
		if ok && (!found || it.Remaining < q.Remaining || it.Remaining == q.Remaining && it.Reset > q.Reset) {
			q, found = it, true
		}
	}
	if !found {
		return Quota{}, false
	}
	q.Unit = "requests"
	if v, ok := value(h, policyField); ok {
		if policies, ok := parseList(v); ok {
			describe(&q, policies)
		}
	}
	return q, true
}

// serviceLimit returns the quota of one RateLimit item: a name (a String,
// or a Token as some servers send it), r, and the optional t and pk.
func serviceLimit(it *sfItem) (Quota, bool) {
	name, ok := itemName(it)
	r, okR := it.param("r")
	if !ok || !okR || !nonNegative(r, sfInteger) {
		return Quota{}, false
	}
	q := Quota{Policy: name, Remaining: r.n}
	if t, ok := it.param("t"); ok {
		if !nonNegative(t, sfInteger) {
			return Quota{}, false
		}
		q.Reset = seconds(t.n)
	}
	if pk, ok := it.param("pk"); ok {
		if pk.kind != sfBytes {
			return Quota{}, false
		}
		q.Partition = pk.s
	}
	return q, true
}

// describe fills in q's Limit, Window and Unit, and its Partition if it has
// none, from the RateLimit-Policy item of q's policy (and partition, when
// several items share the name).
func describe(q *Quota, policies []sfItem) {
	var match *sfItem
	for i := range policies {
		it := &policies[i]
		if name, ok := itemName(it); !ok || name != q.Policy {
			continue
		}
		pk, _ := it.param("pk")
		if match == nil || pk.kind == sfBytes && pk.s == q.Partition {
			match = it
		}
	}
	if match == nil {
		return
	}
	if v, ok := match.param("q"); ok && nonNegative(v, sfInteger) {
		q.Limit = v.n
	}
	if v, ok := match.param("w"); ok && nonNegative(v, sfInteger) {
		q.Window = seconds(v.n)
	}
	if v, ok := match.param("qu"); ok && v.kind == sfString && v.s != "" {
		q.Unit = v.s
	}
	if v, ok := match.param("pk"); ok && v.kind == sfBytes && q.Partition == "" {
		q.Partition = v.s // the partition of a policy whose RateLimit item names none
	}
}

// readDraft07 reads v, the value of RateLimit, as the Dictionary of draft
// -07, with the window of the first RateLimit-Policy item (`10;w=1`).
func readDraft07(h http.Header, v string) (Quota, bool) {
	members, ok := parseDictionary(v)
	if !ok {
		return Quota{}, false
	}
	var q Quota
	found := false
	for _, m := range members {
		if !nonNegative(m.bare, sfInteger) {
			if m.key == "remaining" || m.key == "limit" || m.key == "reset" {
				return Quota{}, false
			}
			continue
		}
		switch m.key {
		case "remaining":
			q.Remaining, found = m.bare.n, true
		case "limit":
			q.Limit = m.bare.n
		case "reset":
			q.Reset = seconds(m.bare.n)
		}
	}
	if !found {
		return Quota{}, false
	}
	q.Unit = "requests"
	q.Window = policyWindow(h)
	return q, true
}

// readFamily reads the fields f (Remaining, Limit, Reset) of one of the
// older families. Each is an Integer, or a Decimal as some servers send;
// Limit may be a List, whose first member is the limit (`10, 10;w=1`).
func readFamily(h http.Header, f [3]field, now time.Time) (Quota, bool) {
	v, ok := value(h, f[0])
	if !ok {
		return Quota{}, false
	}
	rem, ok := parseItem(v)
	if !ok || !isCount(rem.bare) {
		return Quota{}, false
	}
	q := Quota{Remaining: rem.bare.n, Unit: "requests"}
	if rem.bare.kind == sfDecimal {
		q.Remaining /= 1000
	}
	if v, ok := value(h, f[1]); ok {
		if limits, ok := parseList(v); ok && len(limits) > 0 && isCount(limits[0].bare) {
			q.Limit = limits[0].bare.n
			if limits[0].bare.kind == sfDecimal {
				q.Limit /= 1000
			}
			for i := range limits {
				if w, ok := windowParam(&limits[i]); ok && limits[i].bare == limits[0].bare {
					q.Window = w
					break
				}
			}
		}
	}
	if q.Window == 0 {
		q.Window = policyWindow(h)
	}
	if v, ok := value(h, f[2]); ok {
		if it, ok := parseItem(v); ok && isCount(it.bare) {
			q.Reset, _ = resetAfter(it.bare, h, now)
		}
	}
	return q, true
}

// windowParam returns the w parameter of it (Envoy: window), in seconds.
func windowParam(it *sfItem) (time.Duration, bool) {
	for _, k := range [...]string{"w", "window"} {
		if v, ok := it.param(k); ok && nonNegative(v, sfInteger) && v.n > 0 {
			return seconds(v.n), true
		}
	}
	return 0, false
}

// policyWindow returns the w of the first item of RateLimit-Policy in its
// form of the drafts -04 to -07 (`100;w=60`), or 0.
func policyWindow(h http.Header) time.Duration {
	if v, ok := value(h, policyField); ok {
		if items, ok := parseList(v); ok && len(items) > 0 && items[0].bare.kind == sfInteger {
			w, _ := windowParam(&items[0])
			return w
		}
	}
	return 0
}

// unixThreshold is the smallest reset that is a Unix time, in seconds:
// 2001-09-09, or a delta of 31 years.
const unixThreshold = 1_000_000_000

// resetAfter returns the time until the reset b, an Integer or Decimal of
// seconds: a delta, or a Unix time within a year of the response's Date
// (else now). A Unix time further away is no reset.
func resetAfter(b sfBare, h http.Header, now time.Time) (time.Duration, bool) {
	ms := b.n // thousandths of a second
	if b.kind == sfInteger {
		ms *= 1000
	}
	if ms < unixThreshold*1000 {
		return time.Duration(ms) * time.Millisecond, true
	}
	d := time.UnixMilli(ms).Sub(responseTime(h, now))
	const year = 366 * 24 * time.Hour
	if d > year || d < -year {
		return 0, false
	}
	return max(d, 0), true
}

// RetryAfter returns the wait that the Retry-After field of h, a response
// received at now, asks for, and whether it asks for one: delay-seconds,
// or an HTTP-date taken relative to the response's Date field (else now),
// never negative. A malformed value, or two lines that differ, ask for
// none; a wait too long for a Duration is the longest Duration.
func RetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	vs := h["Retry-After"]
	if len(vs) == 0 {
		return 0, false
	}
	for _, v := range vs[1:] {
		if v != vs[0] {
			return 0, false
		}
	}
	v := strings.Trim(vs[0], " \t")
	if v != "" && strings.Trim(v, "0123456789") == "" {
		v = strings.TrimLeft(v, "0")
		if len(v) > 15 {
			return math.MaxInt64, true
		}
		var n int64
		for i := 0; i < len(v); i++ {
			n = n*10 + int64(v[i]-'0')
		}
		return seconds(n), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(responseTime(h, now)), 0), true
}

// responseTime returns the time the response h was made: its Date field,
// by the server's own clock, or now.
func responseTime(h http.Header, now time.Time) time.Time {
	if d := h["Date"]; len(d) == 1 {
		if t, err := http.ParseTime(d[0]); err == nil {
			return t
		}
	}
	return now
}

// seconds returns n seconds as a Duration, the longest Duration when
// that overflows.
func seconds(n int64) time.Duration {
	if n > math.MaxInt64/int64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(n) * time.Second
}

// itemName returns the policy name an item carries: a String, or a Token.
func itemName(it *sfItem) (string, bool) {
	k := it.bare.kind
	return it.bare.s, k == sfString || k == sfToken
}

func nonNegative(b sfBare, kind sfKind) bool { return b.kind == kind && b.n >= 0 }

// isCount reports whether b is a count of the older families: a
// non-negative Integer or Decimal.
func isCount(b sfBare) bool { return nonNegative(b, sfInteger) || nonNegative(b, sfDecimal) }
