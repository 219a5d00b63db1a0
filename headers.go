package ratelimit

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tokenfair/ratelimit/internal/fieldname"
	"github.com/tokenfair/ratelimit/internal/sfv"
)

// HeaderFormat selects the rate-limit header fields a [Middleware] writes
// on every decided response, with Set semantics, so stacked middleware
// never duplicates one. Retry-After is written on every refusal whatever
// the format. The zero value is HeadersIETF. Fields keep the drafts'
// spelling ("RateLimit-Policy"): read them in-process as h["RateLimit"].
type HeaderFormat uint8

// Header formats.
const (
	// HeadersIETF writes RateLimit-Policy and RateLimit as in
	// draft-ietf-httpapi-ratelimit-headers-10 (`"default";q=10;w=2`,
	// `"default";r=9;t=1`); docs/http.md gives each parameter.
	HeadersIETF HeaderFormat = iota
	// HeadersLegacy writes RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset, the early drafts' fields, the reset in seconds
	// until the bucket is full.
	HeadersLegacy
	// HeadersX writes HeadersLegacy's values as X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset.
	HeadersX
	// HeadersNone writes no rate-limit header field.
	HeadersNone
)

var headerFormatNames = [...]string{
	HeadersIETF:   "ietf",
	HeadersLegacy: "legacy",
	HeadersX:      "x",
	HeadersNone:   "none",
}

// MarshalText implements [encoding.TextMarshaler].
func (f HeaderFormat) MarshalText() ([]byte, error) {
	return enumMarshal("header format", headerFormatNames[:], uint8(f))
}

// UnmarshalText implements [encoding.TextUnmarshaler]; it accepts "ietf",
// "legacy", "x" and "none".
func (f *HeaderFormat) UnmarshalText(text []byte) error {
	return enumUnmarshal("header format", headerFormatNames[:], (*uint8)(f), text)
}

// The fields are set by their names as the drafts spell them
// (fieldname.Name.Draft), assigned to the header map directly, so that
// they go out in that spelling (h.Get canonicalises, so read them back
// with the map index, h["RateLimit"]; a client reading the response
// canonicalises as it always does, and HTTP/2 lowercases every name).
// The canonical spelling is deleted first, so that a value set that way
// earlier (by another middleware, or a proxied upstream) is replaced
// rather than sent twice.

// set replaces the field f, in whichever spelling it was set; when fresh,
// h held none of the fields written with it, so nothing is deleted.
func set(h http.Header, f fieldname.Name, v []string, fresh bool) {
	if !fresh {
		delete(h, f.Canonical)
	}
	h[f.Draft] = v
}

// A field's string is made once and shared by every response that sends
// it, so that the usual decision makes no string; its []string is each
// response's own, so that a handler or middleware writing into it
// (h["RateLimit"][0] = …) changes that response only. The fields of one
// response share one backing array, each slice capped at its length.

// smallInts holds the decimal form of each integer below 100.
var smallInts = func() (v [100]string) {
	for i := range v {
		v[i] = strconv.Itoa(i)
	}
	return v
}()

// intString returns the decimal form of n.
func intString(n int64) string {
	if 0 <= n && n < int64(len(smallInts)) {
		return smallInts[n]
	}
	return strconv.FormatInt(n, 10)
}

// intField returns a new field value of n.
func intField(n int64) []string { return []string{intString(n)} }

// quotaCache holds a policy's RateLimit values for the remaining counts r
// nearest 0 and nearest the burst, and the smallest waits t (0: no t),
// made the first time each is sent. A client well within its limit sees
// a nearly full bucket; one at its limit, a nearly empty one.
type quotaCache struct {
	burst  int64                            // the policy's burst, as a Structured Field Integer
	values [2][32][5]atomic.Pointer[string] // [0][i]: r = i; [1][i]: r = burst - i
}

// slot returns where c keeps the value of r and t, or nil if it keeps none
// (c may be nil).
func (c *quotaCache) slot(r, t int64) *atomic.Pointer[string] {
	if c == nil || t >= int64(len(c.values[0][0])) {
		return nil
	}
	n := int64(len(c.values[0]))
	if r < n {
		return &c.values[0][r][t]
	}
	if d := c.burst - r; 0 <= d && d < n {
		return &c.values[1][d][t]
	}
	return nil
}

// quotaField returns the RateLimit value `"name";r=R;t=T`, without t when
// hasT is false, from c when it holds it (c may be nil).
func quotaField(c *quotaCache, name string, r, t int64, hasT bool) string {
	if !hasT {
		t = 0 // t ≥ 1 when present
	}
	slot := c.slot(r, t)
	if slot != nil {
		if v := slot.Load(); v != nil {
			return *v
		}
	}
	f := new(fieldValue)
	b := sfv.AppendString(f.buf[:0], name)
	b = append(b, ";r="...)
	b = sfv.AppendInteger(b, r)
	if hasT {
		b = append(b, ";t="...)
		b = sfv.AppendInteger(b, t)
	}
	f.s = unsafe.String(unsafe.SliceData(b), len(b))
	if slot != nil {
		slot.Store(&f.s)
	}
	return f.s
}

// fieldValue is a field's string and its bytes in one allocation. The
// bytes are never written again once the string is made.
type fieldValue struct {
	s   string
	buf [112]byte // a quoted name of at most 64 bytes and two 15-digit parameters
}

// writeFields sets the rate-limit header fields of format f that describe
// res, replacing any earlier value of those fields. policies is the
// RateLimit-Policy value of the limiter (see limitHeaders.policyField), and
// quotas the cache of res.Policy's RateLimit values (nil for none). It
// writes nothing for HeadersNone or an unknown format.
func writeFields(h http.Header, f HeaderFormat, res Result, policies string, quotas *quotaCache) {
	p := res.Policy
	fresh := len(h) == 0
	switch f {
	case HeadersIETF:
		t, hasT := quotaSeconds(res)
		v := &[2]string{quotaField(quotas, p.Name, sfv.Clamp(res.Remaining), t, hasT), policies}
		set(h, fieldname.Quota, v[0:1:1], fresh)
		set(h, fieldname.Policy, v[1:2:2], fresh)
	case HeadersLegacy, HeadersX:
		names := &fieldname.Legacy
		if f == HeadersX {
			names = &fieldname.X
		}
		v := &[3]string{intString(p.Limit.Burst()), intString(max(res.Remaining, 0)), intString(ceilSeconds(res.ResetAfter))}
		set(h, names[fieldname.Limit], v[0:1:1], fresh)
		set(h, names[fieldname.Remaining], v[1:2:2], fresh)
		set(h, names[fieldname.Reset], v[2:3:3], fresh)
	}
}

// limitHeaders is what a Middleware writes of one Limiter's policies:
// their RateLimit-Policy values, made once, and their RateLimit values.
type limitHeaders struct {
	lim    *Limiter     // whose results these describe
	quotas []quotaCache // of each policy
	fields [2]string    // RateLimit-Policy: of the enforcing policies, of all
	hidden bool         // every policy is dry-run

	// With a calendar quota or LimitFor, RateLimit-Policy depends on the
	// time or the key: it is made for each response, and its strings are
	// kept here, made once each, in a map copied on write.
	dynamic bool
	made    cowMap[string, string]
}

func newLimitHeaders(l *Limiter) *limitHeaders {
	ps := l.Policies()
	c := &limitHeaders{lim: l, quotas: make([]quotaCache, len(ps)), hidden: true}
	for i := range ps {
		c.quotas[i].burst = sfv.Clamp(ps[i].Limit.Burst())
		c.hidden = c.hidden && ps[i].DryRun
		c.dynamic = c.dynamic || ps[i].LimitFor != nil || ps[i].Limit.cal != rate
	}
	if !c.dynamic {
		c.fields = [2]string{string(appendPolicies(nil, ps, nil, false, time.Time{})), string(appendPolicies(nil, ps, nil, true, time.Time{}))}
	}
	return c
}

// maxMadeFields bounds the RateLimit-Policy values a dynamic limitHeaders
// keeps; past it, a value is made again each time.
const maxMadeFields = 256

// policyField returns the RateLimit-Policy value for res at now: made
// once for a Limiter whose field does not change, else (and for a local
// decision, under shares of the limits) from the limits that decided res.
func (c *limitHeaders) policyField(res Result, withDryRun bool, now func() time.Time) string {
	k := 0
	if withDryRun {
		k = 1
	}
	if !c.dynamic && !res.Local {
		return c.fields[k]
	}
	var buf [256]byte
	b := appendPolicies(buf[:0], c.lim.policies, &res, withDryRun, now())
	if m := c.made.m.Load(); m != nil {
		if v, ok := (*m)[string(b)]; ok { // (read in place: string(b) makes no string)
			return v
		}
	}
	v := string(b)
	return c.made.add(v, v, maxMadeFields)
}

// quotasOf returns the cache of p's RateLimit values, or nil when p is not
// one of the Limiter's policies.
func (c *limitHeaders) quotasOf(p *Policy) *quotaCache {
	if i := c.lim.index(p); i >= 0 {
		return &c.quotas[i]
	}
	return nil
}

// headerCaches holds a Middleware's limitHeaders: its own Limiter's, and
// those of the limiters MiddlewareOptions.LimiterFor picks, in a map copied
// on write, so that finding one takes no lock and allocates nothing.
type headerCaches struct {
	own    *Limiter
	ownH   *limitHeaders
	others cowMap[*Limiter, *limitHeaders]
}

// maxHeaderCaches bounds the limiters whose header values a Middleware
// keeps, in case LimiterFor makes new ones as it goes.
const maxHeaderCaches = 64

// of returns l's limitHeaders.
func (hc *headerCaches) of(l *Limiter) *limitHeaders {
	if l == hc.own {
		return hc.ownH
	}
	if c, ok := hc.others.get(l); ok {
		return c
	}
	return hc.others.add(l, newLimitHeaders(l), maxHeaderCaches)
}

// writeHeaders writes the rate-limit header fields of res, decided by lim:
// none for a degraded decision that checked nothing (a local one's are its
// share's), or when every policy is dry-run and hidden.
// With DryRunHeaders every policy is listed, and an allowed request's
// RateLimit is the binding one of every policy, dry-run ones included; a
// refusal's is the refusing policy's, so that t is Retry-After.
func (m *Middleware) writeHeaders(h http.Header, lim *Limiter, res Result) {
	if res.Degraded && !res.Local {
		return
	}
	c := m.headers.of(lim)
	if c.hidden && !m.cfg.DryRunHeaders {
		return
	}
	var policies string
	if m.cfg.Headers == HeadersIETF {
		policies = c.policyField(res, m.cfg.DryRunHeaders, m.now)
	}
	switch {
	case m.cfg.DryRunHeaders && res.Allowed && res.Results != nil:
		b := res.Results[0]
		for _, r := range res.Results[1:] {
			if r.bindsOver(b) {
				b = r
			}
		}
		writeFields(h, m.cfg.Headers, b, policies, c.quotasOf(b.Policy))
	default:
		writeFields(h, m.cfg.Headers, res, policies, c.quotasOf(res.Policy))
	}
	if m.cfg.inflight != nil {
		m.cfg.inflight.addPolicyItem(h, m.cfg.Headers)
	}
}

// refuse answers the refused request of d: its Retry-After, jittered by
// MiddlewareOptions.RetryJitter, and its header fields, then the deny
// handler.
func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, d *decision) {
	if m.cfg.RetryJitter > 0 {
		j := time.Duration(rand.Int64N(int64(m.cfg.RetryJitter)))
		d.res.RetryAfter = addSaturating(d.res.RetryAfter, j)
		d.res.ResetAfter = max(d.res.ResetAfter, d.res.RetryAfter)
	}
	m.writeHeaders(w.Header(), d.lim, d.res)
	w.Header()["Retry-After"] = intField(retryAfterSeconds(d.res.RetryAfter))
	m.cfg.OnDeny(w, r, d.res)
}

// addSaturating returns d + j for j ≥ 0, or the longest Duration when
// that overflows, so that jitter never turns a long wait into a short one.
func addSaturating(d, j time.Duration) time.Duration {
	if d > math.MaxInt64-j {
		return math.MaxInt64
	}
	return d + j
}

// appendPolicies appends the RateLimit-Policy value that lists ps (the
// dry-run ones only if withDryRun): "name";q=BURST;w=W items joined by
// commas, with qu="UNIT" for a policy whose unit is not requests (the
// draft's default, left unsaid). A policy's limit
// is the one that decided res, when res (which may be nil) says; a
// calendar quota's w is the length of its period at now.
func appendPolicies(b []byte, ps []Policy, res *Result, withDryRun bool, now time.Time) []byte {
	start := len(b)
	for i := range ps {
		p := &ps[i]
		if p.DryRun && !withDryRun {
			continue
		}
		switch {
		case res == nil:
		case len(res.Results) == len(ps) && res.Results[i].Policy != nil:
			p = res.Results[i].Policy
		case res.Results == nil && len(ps) == 1 && res.Policy != nil:
			p = res.Policy
		}
		if len(b) > start {
			b = append(b, ',')
		}
		b = sfv.AppendString(b, p.Name)
		b = append(b, ";q="...)
		b = sfv.AppendInteger(b, p.Limit.Burst())
		if p.Unit != requests && p.Unit != "" {
			b = append(b, ";qu="...)
			b = sfv.AppendString(b, p.Unit)
		}
		b = append(b, ";w="...)
		b = sfv.AppendInteger(b, p.Limit.window(now))
	}
	return b
}

// quotaSeconds returns the t parameter of res and whether it is present: the
// seconds, rounded up, until additional quota is made available. On a
// refusal that is the time until the same request would be allowed, exactly
// the Retry-After value. When allowed, it is the time until the next token:
// ResetAfter modulo the interval, or a whole interval when the remainder is
// 0. A full bucket (ResetAfter 0) has no t.
func quotaSeconds(res Result) (int64, bool) {
	if !res.Allowed {
		return retryAfterSeconds(res.RetryAfter), true
	}
	if res.ResetAfter <= 0 {
		return 0, false
	}
	wait := res.ResetAfter // of a calendar quota: the time to its reset
	if iv := res.Policy.Limit.Interval(); wait > iv && iv > 0 {
		if wait %= iv; wait == 0 {
			wait = iv
		}
	}
	return ceilSeconds(wait), true
}

// ceilSeconds returns d in whole seconds rounded up, or 0 when d is not
// positive. It cannot overflow.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// retryAfterSeconds returns the delay-seconds value of Retry-After for a
// wait of d: d rounded up to whole seconds, and at least 1, so a client never
// comes back before the request can be allowed.
func retryAfterSeconds(d time.Duration) int64 { return max(1, ceilSeconds(d)) }

// window returns the w parameter of RateLimit-Policy: the time in which the
// burst is earned at the rate as written, burst × period / n, in whole
// seconds rounded up and at least 1. It is the period itself when the burst
// is n; for a calendar quota, the length of its period at now.
func (l Limit) window(now time.Time) int64 {
	if l.cal != rate {
		start, end := l.Period(now)
		return max(ceilSeconds(end.Sub(start)), 1)
	}
	if l.n <= 0 || l.period <= 0 || l.burst <= 0 {
		return 1
	}
	// ⌈⌈burst × period / n⌉ / 1s⌉ = ⌈burst × period / (n × 1s)⌉, in 128 bits.
	hi, lo := bits.Mul64(uint64(l.burst), uint64(l.period))
	if hi >= uint64(l.n) {
		return sfv.MaxInteger
	}
	ns, r := bits.Div64(hi, lo, uint64(l.n))
	if r != 0 {
		ns++
	}
	q := ns / uint64(time.Second)
	if ns%uint64(time.Second) != 0 {
		q++
	}
	return int64(min(max(q, 1), sfv.MaxInteger))
}
