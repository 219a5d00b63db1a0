package pace

import (
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/tokenfair/ratelimit/internal/fieldname"
	"github.com/tokenfair/ratelimit/internal/sfv"
)

// Quota is what a response declares of one limit: how much of it is left,
// when more comes, and, where the response says, the whole quota, its
// window and its unit. [Read] and [ReadAll] return it.
type Quota struct {
	// Policy is the policy's name in the IETF fields; "" in the forms that
	// name none.
	Policy string
	// Remaining is the quota units left (r or a, remaining, *-Remaining).
	Remaining int64
	// Reset is how long until more quota is made available (t or w,
	// reset, *-Reset); 0 when the response does not say.
	Reset time.Duration
	// Limit is the quota (q, limit, *-Limit); 0 when the response does not
	// say.
	Limit int64
	// Window is the time the quota is granted for (w of RateLimit-Policy);
	// 0 when the response does not say.
	Window time.Duration
	// Unit is what the quota counts (qu): "requests" unless the response
	// names another unit, such as "content-bytes", "concurrent-requests"
	// or one of the server's own.
	Unit string
	// Partition is the partition key the quota belongs to (pk, decoded);
	// "" when none.
	Partition string
	// Cost is the quota units the request this response answers consumed
	// (c, which a pending revision of the draft adds); 0 when the response
	// does not say.
	Cost int64
}

// The fields' names come from fieldname's table; Read looks for each in
// both spellings, canonical and as the drafts spell it, which a handler in
// the same process may have set directly (this module's middleware does).

// lines returns the field lines of f in h, in either spelling.
func lines(h http.Header, f fieldname.Name) []string {
	v := h[f.Canonical]
	if w := h[f.Draft]; len(w) > 0 {
		v = append(v[:len(v):len(v)], w...)
	}
	return v
}

// value returns the field lines of f in h as one value, and false when
// there is none or it is longer than the parser takes.
func value(h http.Header, f fieldname.Name) (string, bool) {
	v, ok := sfv.JoinLines(lines(h, f))
	return v, ok && v != ""
}

// Read returns the quota that binds how many requests may be sent, of
// those that the header fields h of a response, received at now, declare
// ([ReadAll]), and whether one does: of the quotas that count requests
// (Unit "requests", the default, or "request"), and of those in any unit
// with nothing left (the server refuses every request until they refill),
// the one with the fewest units left, of those the one with the longest
// Reset. A quota in another unit with some left never binds: 5 bytes left
// are not 5 requests left. The [Transport] paces on what Read returns.
func Read(h http.Header, now time.Time) (Quota, bool) {
	var b Quota
	found := false
	scan(h, now, func(q Quota) {
		if (q.Remaining == 0 || countsRequests(q.Unit)) &&
			(!found || q.Remaining < b.Remaining || q.Remaining == b.Remaining && q.Reset > b.Reset) {
			b, found = q, true
		}
	})
	return b, found
}

// ReadAll returns every quota that the header fields h of a response,
// received at now, declare, whatever they count, or nil when they declare
// none. It reads, in this order, the first form present and well-formed:
//
//   - the IETF draft's RateLimit (-08 to -11: `"default";r=9;t=1`, a
//     Structured Field List): a quota for each item, in the order of the
//     field, with the quota, window and unit of the RateLimit-Policy item
//     of the same name (and partition), if any; a pending revision's `a`
//     and `w` are read as `r` and `t` (of both, the fewer left and the
//     longer reset), and its `c` as the Cost;
//   - the draft-07 RateLimit dictionary (`limit=10, remaining=9, reset=1`);
//   - RateLimit-Remaining, RateLimit-Limit and RateLimit-Reset;
//   - X-RateLimit-Remaining, X-RateLimit-Limit and X-RateLimit-Reset.
//
// The last three declare one quota, of requests. Each field is parsed as
// RFC 9651 requires; a malformed or negative one is ignored (in the List,
// the item that holds it), as are two lines of a field that holds one
// value. The resets of the last two forms are delta seconds, or Unix times
// when at least 10⁹ (no server sends a delta of 31 years), as GitHub sends
// them: a Unix time is taken relative to the response's Date field (else
// now) and ignored when more than a year away from it. docs/client.md
// shows each form.
func ReadAll(h http.Header, now time.Time) []Quota {
	var all []Quota
	scan(h, now, func(q Quota) { all = append(all, q) })
	return all
}

// scan calls each for every quota of the first form in h present and
// well-formed, in order (see ReadAll).
func scan(h http.Header, now time.Time, each func(Quota)) {
	if v, ok := value(h, fieldname.Quota); ok {
		if readServiceLimits(h, v, each) {
			return
		}
		if q, ok := readDraft07(h, v); ok {
			each(q)
			return
		}
	}
	for _, f := range [...]*[3]fieldname.Name{&fieldname.Legacy, &fieldname.X} {
		if q, ok := readFamily(h, f, now); ok {
			each(q)
			return
		}
	}
}

// countsRequests reports whether unit counts requests: "requests", or
// "request" as the IANA table of draft -10 spells it.
func countsRequests(unit string) bool { return unit == "requests" || unit == "request" }

// readServiceLimits reads v, the value of RateLimit, as the List of the
// drafts -08 to -11, calls each for the quota of every well-formed item,
// and reports whether there was one.
func readServiceLimits(h http.Header, v string, each func(Quota)) bool {
	items, ok := sfv.ParseList(v)
	if !ok {
		return false
	}
	var policies []sfv.Item
	if v, ok := value(h, fieldname.Policy); ok {
		policies, _ = sfv.ParseList(v)
	}
	found := false
	for i := range items {
		if q, ok := serviceLimit(&items[i]); ok {
			q.Unit = "requests"
			describe(&q, policies)
			each(q)
			found = true
		}
	}
	return found
}

// serviceLimit returns the quota of one RateLimit item: a name (a String,
// or a Token as some servers send it), r, and the optional t, pk and c;
// the pending revision of the draft spells r and t a and w.
func serviceLimit(it *sfv.Item) (Quota, bool) {
	name, ok := itemName(it)
	if !ok {
		return Quota{}, false
	}
	left, hasLeft, okLeft := eitherParam(it, "r", "a", func(x, y int64) int64 { return min(x, y) })
	reset, _, okReset := eitherParam(it, "t", "w", func(x, y int64) int64 { return max(x, y) })
	if !hasLeft || !okLeft || !okReset {
		return Quota{}, false
	}
	q := Quota{Policy: name, Remaining: left, Reset: seconds(reset)}
	if c, ok := it.Param("c"); ok {
		if !nonNegative(c, sfv.Integer) {
			return Quota{}, false
		}
		q.Cost = c.N
	}
	if pk, ok := it.Param("pk"); ok {
		if pk.Kind != sfv.Bytes {
			return Quota{}, false
		}
		q.Partition = pk.S
	}
	return q, true
}

// eitherParam returns the value of it's parameter k, or of k2, its other
// spelling, or what pick makes of both, and whether either is there. ok
// is false when one that is there is no non-negative Integer.
func eitherParam(it *sfv.Item, k, k2 string, pick func(x, y int64) int64) (n int64, found, ok bool) {
	for _, key := range [...]string{k, k2} {
		v, has := it.Param(key)
		switch {
		case !has:
		case !nonNegative(v, sfv.Integer):
			return 0, false, false
		case found:
			n = pick(n, v.N)
		default:
			n, found = v.N, true
		}
	}
	return n, found, true
}

// describe fills in q's Limit, Window and Unit, and its Partition if it has
// none, from the RateLimit-Policy item of q's policy (and partition, when
// several items share the name).
func describe(q *Quota, policies []sfv.Item) {
	var match *sfv.Item
	for i := range policies {
		it := &policies[i]
		if name, ok := itemName(it); !ok || name != q.Policy {
			continue
		}
		pk, _ := it.Param("pk")
		if match == nil || pk.Kind == sfv.Bytes && pk.S == q.Partition {
			match = it
		}
	}
	if match == nil {
		return
	}
	if v, ok := match.Param("q"); ok && nonNegative(v, sfv.Integer) {
		q.Limit = v.N
	}
	if v, ok := match.Param("w"); ok && nonNegative(v, sfv.Integer) {
		q.Window = seconds(v.N)
	}
	if v, ok := match.Param("qu"); ok && v.Kind == sfv.String && v.S != "" {
		q.Unit = v.S
	}
	if v, ok := match.Param("pk"); ok && v.Kind == sfv.Bytes && q.Partition == "" {
		q.Partition = v.S // the partition of a policy whose RateLimit item names none
	}
}

// readDraft07 reads v, the value of RateLimit, as the Dictionary of draft
// -07, with the window of the first RateLimit-Policy item (`10;w=1`).
func readDraft07(h http.Header, v string) (Quota, bool) {
	members, ok := sfv.ParseDictionary(v)
	if !ok {
		return Quota{}, false
	}
	var q Quota
	found := false
	for _, m := range members {
		if !nonNegative(m.Bare, sfv.Integer) {
			if m.Key == "remaining" || m.Key == "limit" || m.Key == "reset" {
				return Quota{}, false
			}
			continue
		}
		switch m.Key {
		case "remaining":
			q.Remaining, found = m.Bare.N, true
		case "limit":
			q.Limit = m.Bare.N
		case "reset":
			q.Reset = seconds(m.Bare.N)
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
func readFamily(h http.Header, f *[3]fieldname.Name, now time.Time) (Quota, bool) {
	v, ok := value(h, f[fieldname.Remaining])
	if !ok {
		return Quota{}, false
	}
	rem, ok := sfv.ParseItem(v)
	if !ok || !isCount(rem.Bare) {
		return Quota{}, false
	}
	q := Quota{Remaining: rem.Bare.N, Unit: "requests"}
	if rem.Bare.Kind == sfv.Decimal {
		q.Remaining /= 1000
	}
	if v, ok := value(h, f[fieldname.Limit]); ok {
		if limits, ok := sfv.ParseList(v); ok && len(limits) > 0 && isCount(limits[0].Bare) {
			q.Limit = limits[0].Bare.N
			if limits[0].Bare.Kind == sfv.Decimal {
				q.Limit /= 1000
			}
			for i := range limits {
				if w, ok := windowParam(&limits[i]); ok && limits[i].Bare == limits[0].Bare {
					q.Window = w
					break
				}
			}
		}
	}
	if q.Window == 0 {
		q.Window = policyWindow(h)
	}
	if v, ok := value(h, f[fieldname.Reset]); ok {
		if it, ok := sfv.ParseItem(v); ok && isCount(it.Bare) {
			q.Reset, _ = resetAfter(it.Bare, h, now)
		}
	}
	return q, true
}

// windowParam returns the w parameter of it (Envoy: window), in seconds.
func windowParam(it *sfv.Item) (time.Duration, bool) {
	for _, k := range [...]string{"w", "window"} {
		if v, ok := it.Param(k); ok && nonNegative(v, sfv.Integer) && v.N > 0 {
			return seconds(v.N), true
		}
	}
	return 0, false
}

// policyWindow returns the w of the first item of RateLimit-Policy in its
// form of the drafts -04 to -07 (`100;w=60`), or 0.
func policyWindow(h http.Header) time.Duration {
	if v, ok := value(h, fieldname.Policy); ok {
		if items, ok := sfv.ParseList(v); ok && len(items) > 0 && items[0].Bare.Kind == sfv.Integer {
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
func resetAfter(b sfv.Bare, h http.Header, now time.Time) (time.Duration, bool) {
	ms := b.N // thousandths of a second
	if b.Kind == sfv.Integer {
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
func itemName(it *sfv.Item) (string, bool) {
	k := it.Bare.Kind
	return it.Bare.S, k == sfv.String || k == sfv.Token
}

func nonNegative(b sfv.Bare, kind sfv.Kind) bool { return b.Kind == kind && b.N >= 0 }

// isCount reports whether b is a count of the older families: a
// non-negative Integer or Decimal.
func isCount(b sfv.Bare) bool { return nonNegative(b, sfv.Integer) || nonNegative(b, sfv.Decimal) }
