package ratelimit

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit/internal/sfv"
)

// Field names as the drafts spell them, the keys writeFields assigns in the
// header map. http.Header.Get canonicalises ("Ratelimit-Policy") and so
// does not find them: read them with headerField, the map index.
var allRateLimitFields = []string{
	"RateLimit-Policy", "RateLimit",
	"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset",
	"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
}

type headerCase struct {
	name string
	res  Result
	// Expected values per format, in the order of the format's fields:
	// ietf: RateLimit-Policy, RateLimit; legacy and x: Limit, Remaining, Reset.
	ietf   [2]string
	legacy [3]string
}

var headerCases = []headerCase{
	{
		name:   "allowed full bucket",
		res:    Result{Allowed: true, Policy: pol("default", PerSecond(5).WithBurst(10)), Remaining: 10},
		ietf:   [2]string{`"default";q=10;w=2`, `"default";r=10`},
		legacy: [3]string{"10", "10", "0"},
	},
	{
		// DESIGN.md, Contract 1: 5/s burst 10 after one request.
		name:   "allowed partial (design example)",
		res:    Result{Allowed: true, Policy: pol("default", PerSecond(5).WithBurst(10)), Remaining: 9, ResetAfter: 200 * time.Millisecond},
		ietf:   [2]string{`"default";q=10;w=2`, `"default";r=9;t=1`},
		legacy: [3]string{"10", "9", "1"},
	},
	{
		// Next token in 0.7 s, bucket full in 2.7 s.
		name:   "allowed partial, t is the next token not the full reset",
		res:    Result{Allowed: true, Policy: pol("api", PerSecond(1).WithBurst(5)), Remaining: 2, ResetAfter: 2700 * time.Millisecond},
		ietf:   [2]string{`"api";q=5;w=5`, `"api";r=2;t=1`},
		legacy: [3]string{"5", "2", "3"},
	},
	{
		name:   "allowed partial, remainder zero waits a whole interval",
		res:    Result{Allowed: true, Policy: pol("slow", Per(1, 7*time.Second).WithBurst(3)), Remaining: 1, ResetAfter: 14 * time.Second},
		ietf:   [2]string{`"slow";q=3;w=21`, `"slow";r=1;t=7`},
		legacy: [3]string{"3", "1", "14"},
	},
	{
		name:   "refused cost 1",
		res:    Result{Policy: pol("default", PerSecond(5).WithBurst(10)), RetryAfter: 200 * time.Millisecond, ResetAfter: 2 * time.Second},
		ietf:   [2]string{`"default";q=10;w=2`, `"default";r=0;t=1`},
		legacy: [3]string{"10", "0", "2"},
	},
	{
		name:   "refused large RetryAfter",
		res:    Result{Policy: pol("default", PerSecond(5).WithBurst(10)), Remaining: 3, RetryAfter: 7300 * time.Millisecond, ResetAfter: 9 * time.Second},
		ietf:   [2]string{`"default";q=10;w=2`, `"default";r=3;t=8`},
		legacy: [3]string{"10", "3", "9"},
	},
	{
		name:   "100 per minute",
		res:    Result{Allowed: true, Policy: pol("per-min", Per(100, time.Minute)), Remaining: 42, ResetAfter: 34*time.Second + 800*time.Millisecond},
		ietf:   [2]string{`"per-min";q=100;w=60`, `"per-min";r=42;t=1`},
		legacy: [3]string{"100", "42", "35"},
	},
	{
		name:   "10000 per day",
		res:    Result{Allowed: true, Policy: pol("daily", Per(10000, 24*time.Hour)), Remaining: 9999, ResetAfter: 8640 * time.Millisecond},
		ietf:   [2]string{`"daily";q=10000;w=86400`, `"daily";r=9999;t=9`},
		legacy: [3]string{"10000", "9999", "9"},
	},
	{
		name:   "every 7s burst 1 refused",
		res:    Result{Policy: pol("p", Per(1, 7*time.Second)), RetryAfter: 6500 * time.Millisecond, ResetAfter: 6500 * time.Millisecond},
		ietf:   [2]string{`"p";q=1;w=7`, `"p";r=0;t=7`},
		legacy: [3]string{"1", "0", "7"},
	},
	{
		name:   "sub-second span",
		res:    Result{Allowed: true, Policy: pol("fast", Per(1, time.Millisecond).WithBurst(5)), Remaining: 4, ResetAfter: time.Millisecond},
		ietf:   [2]string{`"fast";q=5;w=1`, `"fast";r=4;t=1`},
		legacy: [3]string{"5", "4", "1"},
	},
	{
		// standards.md V15 emit vector: "default", 100 per 60 s, 50 left. Its
		// t=30 assumes a fixed window; a token bucket earns the next token
		// within one interval (0.6 s), so t=1.
		name:   "V15 default 100 per 60s, 50 left",
		res:    Result{Allowed: true, Policy: pol("default", Per(100, time.Minute)), Remaining: 50, ResetAfter: 30 * time.Second},
		ietf:   [2]string{`"default";q=100;w=60`, `"default";r=50;t=1`},
		legacy: [3]string{"100", "50", "30"},
	},
	{
		// 60s/9 rounds up to 6666666667ns; the extra 3ns must not make w=61.
		name:   "9 per minute interval rounding",
		res:    Result{Allowed: true, Policy: pol("default", Per(9, time.Minute)), Remaining: 9},
		ietf:   [2]string{`"default";q=9;w=60`, `"default";r=9`},
		legacy: [3]string{"9", "9", "0"},
	},
	{
		name:   "1.5s interval rounds up",
		res:    Result{Policy: pol("default", Per(1, 1500*time.Millisecond)), RetryAfter: 1400 * time.Millisecond, ResetAfter: 1400 * time.Millisecond},
		ietf:   [2]string{`"default";q=1;w=2`, `"default";r=0;t=2`},
		legacy: [3]string{"1", "0", "2"},
	},
	{
		// Burst beyond the 15 digits of an sf-integer is clamped in ietf only.
		name:   "huge burst",
		res:    Result{Allowed: true, Policy: pol("default", Per(1, time.Nanosecond).WithBurst(1_500_000_000_000_000_000)), Remaining: 1_000_000_000_000_000_000, ResetAfter: time.Duration(500_000_000_000_000_000)},
		ietf:   [2]string{`"default";q=999999999999999;w=1500000000`, `"default";r=999999999999999;t=1`},
		legacy: [3]string{"1500000000000000000", "1000000000000000000", "500000000"},
	},
}

func TestWriteFields(t *testing.T) {
	for _, tc := range headerCases {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.res.Policy.Limit.validate(), "precondition: valid limit")
			checkHeaders(t, HeadersIETF, tc.res, map[string]string{
				"RateLimit-Policy": tc.ietf[0],
				"RateLimit":        tc.ietf[1],
			})
			checkHeaders(t, HeadersLegacy, tc.res, map[string]string{
				"RateLimit-Limit":     tc.legacy[0],
				"RateLimit-Remaining": tc.legacy[1],
				"RateLimit-Reset":     tc.legacy[2],
			})
			checkHeaders(t, HeadersX, tc.res, map[string]string{
				"X-RateLimit-Limit":     tc.legacy[0],
				"X-RateLimit-Remaining": tc.legacy[1],
				"X-RateLimit-Reset":     tc.legacy[2],
			})
			checkHeaders(t, HeadersNone, tc.res, map[string]string{})
		})
	}
}

// checkHeaders writes res twice in format f on a header that already holds
// an unrelated field, and checks that exactly the fields in want are set,
// each to one value, and nothing else is touched.
func checkHeaders(t *testing.T, f HeaderFormat, res Result, want map[string]string) {
	t.Helper()
	h := http.Header{"Content-Type": {"text/plain"}}
	writeFields(h, f, res, field(res), nil)
	writeFields(h, f, res, field(res), nil)
	for _, name := range allRateLimitFields {
		got := h[name]
		if v, ok := want[name]; ok {
			assert.Equal(t, []string{v}, got, "writeFields(%v, %+v): %s", f, res, name)
		} else {
			assert.Empty(t, got, "writeFields(%v, %+v) wrote %s, want no such field", f, res, name)
		}
	}
	assert.Len(t, h, len(want)+1, "writeFields(%v, %+v) fields = %v", f, res, h)
	assert.Equal(t, []string{"text/plain"}, h["Content-Type"], "writeFields(%v) touched Content-Type", f)
}

// formatFields lists the fields each format writes, as the drafts spell them.
var formatFields = map[HeaderFormat][]string{
	HeadersIETF:   {"RateLimit-Policy", "RateLimit"},
	HeadersLegacy: {"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"},
	HeadersX:      {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"},
	HeadersNone:   nil,
}

// Earlier values under the same spelling (an outer middleware of this
// package, or the same one twice) are replaced, not added to.
func TestWriteHeadersReplacesEarlierValues(t *testing.T) {
	res := headerCases[1].res
	for f, own := range formatFields {
		h := http.Header{}
		for _, name := range allRateLimitFields {
			h[name] = append(h[name], "stale")
			h[name] = append(h[name], "stale2")
		}
		writeFields(h, f, res, field(res), nil)
		assert.Len(t, h, len(allRateLimitFields), "writeFields(%v) fields = %v", f, h)
		// The same fields set with h.Add, in the spelling it gives them:
		hc := http.Header{}
		for _, name := range allRateLimitFields {
			hc.Add(name, "stale")
		}
		writeFields(hc, f, res, field(res), nil)
		for _, name := range own {
			assert.NotContains(t, hc, http.CanonicalHeaderKey(name), "writeFields(%v) left the canonical %s", f, name)
			assert.Len(t, hc[name], 1, "writeFields(%v): %s", f, name)
		}
		assert.Len(t, hc, len(allRateLimitFields), "writeFields(%v) over h.Add's fields = %v", f, hc)
		for _, name := range allRateLimitFields {
			got := h[name]
			if slices.Contains(own, name) {
				if assert.Len(t, got, 1, "writeFields(%v): %s = %q, want one value", f, name, got) {
					assert.NotEqual(t, "stale", got[0], "writeFields(%v): %s", f, name)
				}
			} else {
				assert.Equal(t, []string{"stale", "stale2"}, got, "writeFields(%v) touched %s", f, name)
			}
		}
	}
}

// A later append to one field (what h.Add does, here under the draft
// spelling) must not overwrite another field's value, nor the value that
// the next response gets, even though the fields share a backing array.
func TestWriteHeadersAddAfterwards(t *testing.T) {
	for _, tc := range headerCases {
		res := tc.res
		quotas := new(quotaCache) // the RateLimit values cached, as a Limiter has them
		for f, own := range formatFields {
			for _, added := range own {
				h := http.Header{}
				writeFields(h, f, res, field(res), quotas)
				fresh := h.Clone()
				want := h.Clone()
				h[added] = append(h[added], "extra")
				want[added] = append(want[added], "extra")
				assert.Equal(t, want, h, "%s: writeFields(%v); append to %s", tc.name, f, added)
				next := http.Header{}
				writeFields(next, f, res, field(res), quotas)
				assert.Equal(t, fresh, next, "%s: writeFields(%v) after an append to %s", tc.name, f, added)
			}
		}
	}
}

// A handler or middleware that writes into a field's value in place
// (h["RateLimit"][0] = …) changes that response only: neither another
// field of it nor the next response.
func TestWriteHeadersEditInPlace(t *testing.T) {
	for _, tc := range headerCases {
		res := tc.res
		quotas := new(quotaCache) // the RateLimit values cached, as a Limiter has them
		for f, own := range formatFields {
			for _, edited := range own {
				h := http.Header{}
				writeFields(h, f, res, field(res), quotas)
				fresh := h.Clone()
				h[edited][0] = "edited"
				want := fresh.Clone()
				want[edited] = []string{"edited"}
				assert.Equal(t, want, h, "%s: writeFields(%v); %s edited", tc.name, f, edited)
				next := http.Header{}
				writeFields(next, f, res, field(res), quotas)
				assert.Equal(t, fresh, next, "%s: writeFields(%v) after an edit of %s", tc.name, f, edited)
			}
		}
	}
	v := intField(7)
	v[0] = "edited"
	assert.Equal(t, []string{"7"}, intField(7), "intField(7) after an edit")
}

// RateLimit-Policy's w is the period as the user wrote it (burst × period
// / n), whatever the interval rounds to; several policies are listed in
// order, and dry-run ones only when asked.
func TestPolicyField(t *testing.T) {
	for _, tc := range []struct {
		l    Limit
		want string
	}{
		{Per(9, time.Minute), `"p";q=9;w=60`},
		{PerSecond(5).WithBurst(10), `"p";q=10;w=2`},
		{Per(2, 3*time.Second), `"p";q=2;w=3`},
		{PerSecond(3), `"p";q=3;w=1`},
		{Per(1, 24*time.Hour), `"p";q=1;w=86400`},
		{Per(7, time.Hour).WithBurst(1), `"p";q=1;w=515`}, // 3600/7 = 514.3 s, rounded up
		{Per(1, time.Nanosecond).WithBurst(1_500_000_000_000_000_000), `"p";q=999999999999999;w=1500000000`},
	} {
		assert.Equal(t, tc.want, policyField([]Policy{{Name: "p", Limit: tc.l}}, false), "policyField(%v)", tc.l)
	}
	ps := []Policy{
		{Name: "per-key", Limit: PerSecond(5).WithBurst(10)},
		{Name: "shadow", Limit: Per(1, time.Minute), DryRun: true},
		{Name: "daily", Limit: Per(10000, 24*time.Hour)},
	}
	assert.Equal(t, `"per-key";q=10;w=2,"daily";q=10000;w=86400`, policyField(ps, false))
	assert.Equal(t, `"per-key";q=10;w=2,"shadow";q=1;w=60,"daily";q=10000;w=86400`, policyField(ps, true))
}

// The field names go out as the drafts spell them, not canonicalised.
func TestHeaderNamesAsTheDraftsSpellThem(t *testing.T) {
	res := Result{Allowed: true, Policy: pol("default", PerSecond(5).WithBurst(10)), Remaining: 9, ResetAfter: 200 * time.Millisecond}
	var names []string
	for _, f := range []HeaderFormat{HeadersIETF, HeadersLegacy, HeadersX} {
		h := http.Header{}
		writeFields(h, f, res, field(res), nil)
		for k := range h {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	assert.Equal(t, []string{"RateLimit", "RateLimit-Limit", "RateLimit-Policy", "RateLimit-Remaining", "RateLimit-Reset",
		"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}, names)
}

// The RateLimit values that a policy made by New caches (r near 0 and near
// the burst, small t) are the ones it would make afresh, with and without
// t, stay per policy, and are made once.
func TestQuotaFieldCache(t *testing.T) {
	lim, err := New(nopStore{}, Policy{Name: "a", Limit: PerSecond(5).WithBurst(100)}, Policy{Name: "b", Limit: PerSecond(5).WithBurst(100)})
	require.NoError(t, err)
	caches := newLimitHeaders(lim)
	assert.Nil(t, caches.quotasOf(&Policy{Name: "a"}), "not one of the limiter's policies")
	for round := range 2 { // the second round reads what the first one stored
		for i := range lim.Policies() {
			p := &lim.Policies()[i]
			c := caches.quotasOf(p)
			require.NotNil(t, c, "the cache of %q", p.Name)
			for r := int64(0); r <= 101; r++ {
				for tt := int64(0); tt <= 7; tt++ {
					for _, hasT := range []bool{false, true} {
						if hasT && tt == 0 {
							continue // t ≥ 1 when present
						}
						want := quotaField(nil, p.Name, r, tt, hasT)
						assert.Equal(t, want, quotaField(c, p.Name, r, tt, hasT), "round %d: %q: quotaField(%d, %d, %v)", round, p.Name, r, tt, hasT)
					}
				}
			}
		}
	}
	c := caches.quotasOf(&lim.Policies()[0])
	for _, r := range []int64{0, 31, 69, 99, 100} {
		assert.Zero(t, testing.AllocsPerRun(10, func() { quotaField(c, "a", r, 1, true) }), "quotaField(r=%d of a burst of 100) allocates", r)
	}
	assert.NotZero(t, testing.AllocsPerRun(10, func() { quotaField(c, "a", 50, 1, true) }), "r=50 of a burst of 100 is not cached")
}

func TestWriteHeadersUnknownFormat(t *testing.T) {
	h := http.Header{}
	writeFields(h, HeadersNone+1, headerCases[1].res, field(headerCases[1].res), nil)
	assert.Empty(t, h, "writeFields(HeaderFormat(4)) wrote fields")
}

// With a refusal, Retry-After (as the middleware computes it) is never
// earlier than t.
func TestRetryAfterNotBeforeT(t *testing.T) {
	for _, tc := range headerCases {
		if tc.res.Allowed {
			continue
		}
		h := http.Header{}
		writeFields(h, HeadersIETF, tc.res, field(tc.res), nil)
		items, err := parseSFList(h["RateLimit"][0])
		require.NoError(t, err, "%s: RateLimit %q", tc.name, h["RateLimit"][0])
		require.Len(t, items, 1)
		tv, ok := items[0].params["t"]
		require.True(t, ok, "%s: refusal without t", tc.name)
		assert.GreaterOrEqual(t, retryAfterSeconds(tc.res.RetryAfter), tv, "%s: Retry-After before t", tc.name)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 1},
		{-time.Second, 1},
		{1, 1},
		{200 * time.Millisecond, 1},
		{time.Second, 1},
		{time.Second + 1, 2},
		{1200 * time.Millisecond, 2},
		{1400 * time.Millisecond, 2},
		{7300 * time.Millisecond, 8},
		{time.Hour, 3600},
		{math.MaxInt64, 9223372037},
	} {
		assert.Equal(t, tc.want, retryAfterSeconds(tc.d), "retryAfterSeconds(%v)", tc.d)
	}
}

// The ietf values are Structured Field Lists of a String with Integer
// parameters, with exactly the parameters the draft defines.
func TestIETFHeadersAreSFLists(t *testing.T) {
	for _, tc := range headerCases {
		h := http.Header{}
		writeFields(h, HeadersIETF, tc.res, field(tc.res), nil)
		for _, f := range []struct {
			name     string
			required []string
			optional []string
		}{
			{"RateLimit-Policy", []string{"q", "w"}, nil},
			{"RateLimit", []string{"r"}, []string{"t"}},
		} {
			v := headerField(h, f.name)
			items, err := parseSFList(v)
			require.NoError(t, err, "%s: parseSFList(%s: %s)", tc.name, f.name, v)
			require.Len(t, items, 1, "%s: %s: %s", tc.name, f.name, v)
			it := items[0]
			assert.Equal(t, tc.res.Policy.Name, it.name, "%s: %s name", tc.name, f.name)
			for _, k := range f.required {
				assert.Contains(t, it.params, k, "%s: %s: %s", tc.name, f.name, v)
			}
			for k, n := range it.params {
				assert.Contains(t, append(f.required, f.optional...), k, "%s: %s: unexpected parameter", tc.name, f.name)
				assert.GreaterOrEqual(t, n, int64(0), "%s: %s: %s", tc.name, f.name, v)
			}
			if w, ok := it.params["w"]; ok {
				assert.Positive(t, w, "%s: w must be non-zero", tc.name)
			}
		}
	}
}

func TestHeaderFormatString(t *testing.T) {
	for _, tc := range []struct {
		f    HeaderFormat
		want string
	}{
		{HeadersIETF, "ietf"},
		{HeadersLegacy, "legacy"},
		{HeadersX, "x"},
		{HeadersNone, "none"},
	} {
		text, err := tc.f.MarshalText()
		require.NoError(t, err, "HeaderFormat(%d).MarshalText()", uint8(tc.f))
		assert.Equal(t, tc.want, string(text), "HeaderFormat(%d).MarshalText()", uint8(tc.f))
	}
}

func TestHeaderFormatText(t *testing.T) {
	for _, f := range []HeaderFormat{HeadersIETF, HeadersLegacy, HeadersX, HeadersNone} {
		text, err := f.MarshalText()
		require.NoError(t, err, "%v.MarshalText()", f)
		got := HeaderFormat(99)
		require.NoError(t, got.UnmarshalText(text), "UnmarshalText(%q)", text)
		assert.Equal(t, f, got, "UnmarshalText(%q)", text)
	}
	_, err := (HeadersNone + 1).MarshalText()
	assert.ErrorContains(t, err, "unknown header format 4")
	for _, bad := range []string{"", "IETF", "draft-10", " ietf", "HeaderFormat(4)"} {
		f := HeadersX
		err := f.UnmarshalText([]byte(bad))
		if assert.Error(t, err, "UnmarshalText(%q)", bad) {
			assert.Contains(t, err.Error(), strconv.Quote(bad), "UnmarshalText(%q) error", bad)
			assert.Contains(t, err.Error(), `"ietf" "legacy" "x" "none"`, "UnmarshalText(%q) error lists the valid names", bad)
		}
		assert.Equal(t, HeadersX, f, "a failed UnmarshalText(%q) changes nothing", bad)
	}
}

func TestHeaderFormatFlag(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f HeaderFormat
	fs.TextVar(&f, "headers", HeadersLegacy, "rate-limit header fields")
	assert.Equal(t, HeadersLegacy, f, "the default")
	assert.Equal(t, "legacy", fs.Lookup("headers").DefValue)
	require.NoError(t, fs.Parse([]string{"-headers=none"}))
	assert.Equal(t, HeadersNone, f)
	err := fs.Parse([]string{"-headers", "draft-10"})
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), `"draft-10"`)
		assert.Contains(t, err.Error(), `"ietf"`)
	}
}

func BenchmarkWriteHeaders(b *testing.B) {
	res := Result{
		Allowed: true, Policy: pol("default", PerSecond(5).WithBurst(10)),
		Remaining: 9, ResetAfter: 200 * time.Millisecond,
	}
	for _, f := range []HeaderFormat{HeadersIETF, HeadersLegacy, HeadersX, HeadersNone} {
		name, _ := f.MarshalText()
		b.Run(string(name), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				h := make(http.Header, 8)
				n := 0
				for pb.Next() {
					writeFields(h, f, res, field(res), nil)
					n++
				}
				if want := len(formatFields[f]); n > 0 && len(h) != want {
					b.Errorf("writeFields(%v) wrote %d fields, want %d", f, len(h), want)
				}
			})
		})
	}
}

// sfItem is one member of a Structured Field List whose Item is a String and
// whose parameters are all Integers, the shape of the draft -10 fields.
type sfItem struct {
	name   string
	params map[string]int64
}

// parseSFList parses s, an sf-list, with the parser pace reads the
// fields with (internal/sfv), and requires the shape of the draft -10
// fields: every member a String, every parameter an Integer.
func parseSFList(s string) ([]sfItem, error) {
	members, ok := sfv.ParseList(s)
	if !ok {
		return nil, errors.New("not an sf-list")
	}
	items := make([]sfItem, 0, len(members))
	for _, m := range members {
		if m.Bare.Kind != sfv.String {
			return nil, fmt.Errorf("member %+v is no String", m.Bare)
		}
		it := sfItem{name: m.Bare.S, params: map[string]int64{}}
		for _, p := range m.Params {
			if p.Val.Kind != sfv.Integer {
				return nil, fmt.Errorf("parameter %s of %q is no Integer", p.Key, it.name)
			}
			it.params[p.Key] = p.Val.N
		}
		items = append(items, it)
	}
	return items, nil
}

// headerField returns the first value of the field name as spelled, or "":
// the map index, for the draft-spelled names that h.Get does not find.
func headerField(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// field is the RateLimit-Policy value of a limiter with res's policy alone.
func field(res Result) string {
	return policyField([]Policy{*res.Policy}, false)
}

// policyField is the RateLimit-Policy value that lists ps, of requests
// that count.
func policyField(ps []Policy, withDryRun bool) string {
	return string(appendPolicies(nil, ps, nil, withDryRun, time.Time{}))
}

// pol returns a policy, for a Result's Policy field.
func pol(name string, l Limit) *Policy { return &Policy{Name: name, Limit: l} }

// FuzzHeaders writes the header fields of arbitrary results and parses
// them back: the IETF fields are well-formed sf-lists that carry the
// result's values, and every value is a non-negative integer.
func FuzzHeaders(f *testing.F) {
	f.Add("default", int64(200_000_000), int64(10), int64(9), int64(200_000_000), int64(0), true)
	f.Add("a.b-c_d", int64(1), int64(1), int64(0), int64(1), int64(7_300_000_000), false)
	f.Fuzz(func(t *testing.T, name string, interval, burst, remaining, resetAfter, retryAfter int64, allowed bool) {
		if !validName(name) || interval < 1 || burst < 1 || burst > int64(maxSpan)/interval || remaining < 0 || remaining > burst || resetAfter < 0 || retryAfter < 0 {
			t.Skip()
		}
		res := Result{Allowed: allowed, Policy: pol(name, Per(1, time.Duration(interval)).WithBurst(burst)),
			Remaining: remaining, ResetAfter: time.Duration(resetAfter), RetryAfter: time.Duration(retryAfter)}
		h := http.Header{}
		writeFields(h, HeadersIETF, res, field(res), nil)
		policies, err := parseSFList(h["RateLimit-Policy"][0])
		if err != nil || len(policies) != 1 || policies[0].name != name || policies[0].params["q"] != min(burst, sfv.MaxInteger) || policies[0].params["w"] < 1 {
			t.Fatalf("RateLimit-Policy %q: %v %+v", h["RateLimit-Policy"][0], err, policies)
		}
		limit, err := parseSFList(h["RateLimit"][0])
		if err != nil || len(limit) != 1 || limit[0].name != name || limit[0].params["r"] != min(remaining, sfv.MaxInteger) {
			t.Fatalf("RateLimit %q: %v %+v", h["RateLimit"][0], err, limit)
		}
		if !allowed && limit[0].params["t"] != retryAfterSeconds(res.RetryAfter) {
			t.Fatalf("RateLimit %q: t is not Retry-After %d", h["RateLimit"][0], retryAfterSeconds(res.RetryAfter))
		}
		for _, format := range []HeaderFormat{HeadersLegacy, HeadersX} {
			h := http.Header{}
			writeFields(h, format, res, "", nil)
			for k, v := range h {
				if n, err := strconv.ParseInt(v[0], 10, 64); err != nil || n < 0 {
					t.Fatalf("%v: %s: %q", format, k, v)
				}
			}
		}
	})
}

// The w parameter of RateLimit-Policy is the time the burst takes to earn
// at the rate as written, so it is exact however the interval rounds.
func TestLimitWindow(t *testing.T) {
	for _, tc := range []struct {
		l    Limit
		want int64
	}{
		{Per(9, time.Minute), 60}, // 9 × 6666666667 ns would be 60.000000003 s
		{PerSecond(5).WithBurst(10), 2},
		{Per(2, 3*time.Second), 3},
		{PerSecond(3), 1},
		{PerSecond(7).WithBurst(14), 2},
		{PerSecond(3).WithBurst(2), 1},          // 2/3 s rounds up to 1
		{Per(3, 2*time.Second).WithBurst(4), 3}, // 8/3 s rounds up
		{Per(10000, 24*time.Hour), 86400},
		{Per(1, time.Second+1), 2},
		{Per(1, 1500*time.Millisecond).WithBurst(3), 5},
		{Per(1, time.Nanosecond), 1},
		{Per(1, time.Nanosecond).WithBurst(1_500_000_000_000_000_000), 1_500_000_000},
		{Limit{}, 1},
		{Per(1, math.MaxInt64).WithBurst(math.MaxInt64), sfv.MaxInteger},
	} {
		assert.Equal(t, tc.want, tc.l.window(time.Time{}), "%v.window()", tc.l)
	}
	// Per with a whole number of seconds: w is the period, for any n.
	for _, n := range []int64{1, 3, 7, 9, 11, 13, 60, 97, 100, 999, 7_000_000, 999_999_999} {
		for _, p := range []time.Duration{time.Second, 7 * time.Second, time.Minute, time.Hour, 24 * time.Hour, 30 * 24 * time.Hour} {
			l := Per(n, p)
			if l.validate() != nil {
				continue
			}
			assert.Equal(t, int64(p/time.Second), l.window(time.Time{}), "Per(%d, %v).window()", n, p)
		}
	}
}
