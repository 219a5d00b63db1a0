package sfv

import (
	"encoding/base64"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The serialisation of RFC 9651 §4.1, for the tests: what a parse gave,
// written back in canonical form.

func serializeList(items []Item) string {
	var b strings.Builder
	for i := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		writeItemOrInner(&b, &items[i])
	}
	return b.String()
}

func serializeDictionary(members []Member) string {
	var b strings.Builder
	for i := range members {
		if i > 0 {
			b.WriteString(", ")
		}
		m := &members[i]
		b.WriteString(m.Key)
		if m.Bare == (Bare{Kind: Boolean, N: 1}) {
			writeParams(&b, m.Params)
			continue
		}
		b.WriteByte('=')
		writeItemOrInner(&b, &m.Item)
	}
	return b.String()
}

func serializeItem(it Item) string {
	var b strings.Builder
	writeItemOrInner(&b, &it)
	return b.String()
}

func writeItemOrInner(b *strings.Builder, it *Item) {
	if it.Bare.Kind == Inner {
		b.WriteByte('(')
		for i := range it.Inner {
			if i > 0 {
				b.WriteByte(' ')
			}
			writeItemOrInner(b, &it.Inner[i])
		}
		b.WriteByte(')')
	} else {
		writeBare(b, it.Bare)
	}
	writeParams(b, it.Params)
}

func writeParams(b *strings.Builder, params []Param) {
	for _, p := range params {
		b.WriteByte(';')
		b.WriteString(p.Key)
		if p.Val != (Bare{Kind: Boolean, N: 1}) {
			b.WriteByte('=')
			writeBare(b, p.Val)
		}
	}
}

func writeBare(b *strings.Builder, v Bare) {
	switch v.Kind {
	case Integer:
		b.WriteString(strconv.FormatInt(v.N, 10))
	case Decimal:
		n := v.N
		if n < 0 {
			b.WriteByte('-')
			n = -n
		}
		frac := strings.TrimRight(strconv.FormatInt(1000+n%1000, 10)[1:], "0")
		if frac == "" {
			frac = "0"
		}
		b.WriteString(strconv.FormatInt(n/1000, 10) + "." + frac)
	case String:
		b.WriteByte('"')
		for i := 0; i < len(v.S); i++ {
			if v.S[i] == '"' || v.S[i] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(v.S[i])
		}
		b.WriteByte('"')
	case Token:
		b.WriteString(v.S)
	case Bytes:
		b.WriteString(":" + base64.StdEncoding.EncodeToString([]byte(v.S)) + ":")
	case Boolean:
		b.WriteString("?" + strconv.FormatInt(v.N, 10))
	case Date:
		b.WriteString("@" + strconv.FormatInt(v.N, 10))
	case Display:
		b.WriteString(`%"`)
		for i := 0; i < len(v.S); i++ {
			c := v.S[i]
			if c == '%' || c == '"' || c < 0x20 || c >= 0x7f {
				b.WriteString("%" + strconv.FormatUint(uint64(c)>>4, 16) + strconv.FormatUint(uint64(c)&15, 16))
			} else {
				b.WriteByte(c)
			}
		}
		b.WriteByte('"')
	}
}

// parseAs parses v as a List, Dictionary or Item and serializes it back.
func parseAs(typ, v string) (string, bool) {
	switch typ {
	case "list":
		l, ok := ParseList(v)
		return serializeList(l), ok
	case "dict":
		d, ok := ParseDictionary(v)
		return serializeDictionary(d), ok
	default:
		it, ok := ParseItem(v)
		return serializeItem(it), ok
	}
}

// sfCase is a field value, the type it is parsed as, and its canonical
// serialization, or "" when it must not parse.
type sfCase struct{ typ, raw, want string }

func checkParse(t *testing.T, cases []sfCase) {
	t.Helper()
	for _, c := range cases {
		got, ok := parseAs(c.typ, c.raw)
		if c.want == "" {
			assert.False(t, ok, "parse %s %q = %q, want failure", c.typ, c.raw, got)
			continue
		}
		if assert.True(t, ok, "parse %s %q failed, want %q", c.typ, c.raw, c.want) {
			assert.Equal(t, c.want, got, "parse %s %q", c.typ, c.raw)
		}
	}
}

// TestParseRFCExamples: the examples of RFC 9651 and of the rate-limit
// drafts, each parsed and written back.
func TestParseRFCExamples(t *testing.T) {
	checkParse(t, []sfCase{
		{"list", `sugar, tea, rum`, `sugar, tea, rum`},
		{"list", `sugar,tea,	rum`, `sugar, tea, rum`},
		{"list", `("foo" "bar"), ("baz"), ("bat" "one"), ()`, `("foo" "bar"), ("baz"), ("bat" "one"), ()`},
		{"list", `("foo"; a=1;b=2);lvl=5, ("bar" "baz");lvl=1`, `("foo";a=1;b=2);lvl=5, ("bar" "baz");lvl=1`},
		{"list", `abc;a=1;b=2; cde_456, (ghi;jk=4 l);q="9";r=w`, `abc;a=1;b=2;cde_456, (ghi;jk=4 l);q="9";r=w`},
		{"dict", `en="Applepie", da=:w4ZibGV0w6ZydGUK:`, `en="Applepie", da=:w4ZibGV0w6ZydGUK:`},
		{"dict", `a=?0, b, c; foo=bar`, `a=?0, b, c;foo=bar`},
		{"dict", `rating=1.5, feelings=(joy sadness)`, `rating=1.5, feelings=(joy sadness)`},
		{"dict", `a=(1 2), b=3, c=4;aa=bb, d=(5 6);valid`, `a=(1 2), b=3, c=4;aa=bb, d=(5 6);valid`},
		{"item", `5; foo=bar`, `5;foo=bar`},
		{"item", `42`, `42`},
		{"item", `4.5`, `4.5`},
		{"item", `"hello world"`, `"hello world"`},
		{"item", `foo123/456`, `foo123/456`},
		{"item", `:cHJldGVuZCB0aGlzIGlzIGJpbmFyeSBjb250ZW50Lg==:`, `:cHJldGVuZCB0aGlzIGlzIGJpbmFyeSBjb250ZW50Lg==:`},
		{"item", `?1`, `?1`},
		{"item", `@1659578233`, `@1659578233`},
		{"item", `%"This is intended for display to %c3%bcsers."`, `%"This is intended for display to %c3%bcsers."`},
		// The drafts' fields (draft-ietf-httpapi-ratelimit-headers-10).
		{"list", `"burst";q=100;w=60,"daily";q=1000;w=86400`, `"burst";q=100;w=60, "daily";q=1000;w=86400`},
		{"list", `"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:`, `"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUA==:`},
		{"list", `"default";r=999;pk=:dHJpYWwxMjEzMjM=:`, `"default";r=999;pk=:dHJpYWwxMjEzMjM=:`},
		{"list", `"hour";q=1000;w=3600, "day";q=5000;w=86400`, `"hour";q=1000;w=3600, "day";q=5000;w=86400`},
		{"list", `"x"; q=10; w=1`, `"x";q=10;w=1`},
		{"list", `quota;q=100;w=1`, `quota;q=100;w=1`},
		{"list", `"sliding";q=100;w=60;burst=1000`, `"sliding";q=100;w=60;burst=1000`},
		{"list", `10;w=1, 50;w=60, 1000;w=3600, 5000;w=86400`, `10;w=1, 50;w=60, 1000;w=3600, 5000;w=86400`},
		{"dict", `limit=100, remaining=50, reset=5`, `limit=100, remaining=50, reset=5`},
	})
}

// TestParseRules: the corners of each algorithm of RFC 9651 §4.2.
func TestParseRules(t *testing.T) {
	checkParse(t, []sfCase{
		// Lists and inner lists.
		{"list", `a,`, ""},
		{"list", `,a`, ""},
		{"list", `a,,b`, ""},
		{"list", `a b`, ""},
		{"list", `( 1  2 )`, `(1 2)`},
		{"list", `(1 2`, ""},
		{"list", `(1,2)`, ""},
		{"list", `(1)x`, ""},
		{"list", ` a , b `, `a, b`},
		{"list", "a\t,b", `a, b`},
		{"list", "\ta", ""}, // only SP is discarded around the value
		// Parameters: a space after ';' only; the last value of a key, in
		// its first place.
		{"list", `"x" ;r=1`, ""},
		{"list", `1;a=1;b=2;a=3`, `1;a=3;b=2`},
		{"list", `1;A=1`, ""},
		{"list", `1;a=`, ""},
		{"list", `1;*a.b-c_d=?0`, `1;*a.b-c_d=?0`},
		// Dictionaries.
		{"dict", `a=1, b=2, a=3`, `a=3, b=2`},
		{"dict", `a=1,`, ""},
		{"dict", `A=1`, ""},
		{"dict", `a=`, ""},
		{"dict", `a=1;x, b;y=2`, `a=1;x, b;y=2`},
		{"dict", `"a"=1`, ""},
		// Integers and Decimals.
		{"item", `042`, `42`},
		{"item", `-0`, `0`},
		{"item", `-42`, `-42`},
		{"item", `999999999999999`, `999999999999999`},
		{"item", `-999999999999999`, `-999999999999999`},
		{"item", `1000000000000000`, ""},
		{"item", `-`, ""},
		{"item", `-a`, ""},
		{"item", `4-2`, ""},
		{"item", `1.50`, `1.5`},
		{"item", `1.000`, `1.0`},
		{"item", `-1.5`, `-1.5`},
		{"item", `123456789012.123`, `123456789012.123`},
		{"item", `1234567890123.1`, ""},
		{"item", `1.2345`, ""},
		{"item", `1.`, ""},
		{"item", `1..2`, ""},
		{"item", `1.2.3`, ""},
		{"item", `.5`, ""},
		// Strings.
		{"item", `"\"q\" \\"`, `"\"q\" \\"`},
		{"item", `"\x"`, ""},
		{"item", `"open`, ""},
		{"item", "\"tab\t\"", ""},
		{"item", `""`, `""`},
		// Tokens.
		{"item", `*foo`, `*foo`},
		{"item", `a:b/c!#$%&'*+-.^_|~1`, `a:b/c!#$%&'*+-.^_|~1`},
		{"item", `1foo`, ""},
		{"item", "fo\xc3\xa9", ""}, // no byte outside ASCII
		// Byte Sequences: missing padding is accepted, misplaced padding not.
		{"item", `:aGVsbG8:`, `:aGVsbG8=:`},
		{"item", `::`, `::`},
		{"item", `:aGVsbG8=`, ""},
		{"item", `:aGV=sbG8=:`, ""},
		{"item", `:aGVsbG8===:`, ""},
		{"item", `:=aGVsbG8:`, ""},
		{"item", `:aGVsbG!8=:`, ""},
		{"item", `:a:`, ""},
		// Booleans, Dates, Display Strings.
		{"item", `?0`, `?0`},
		{"item", `?2`, ""},
		{"item", `?`, ""},
		{"item", `@-1`, `@-1`},
		{"item", `@1.5`, ""},
		{"item", `@`, ""},
		{"item", `%"%c3%bc"`, `%"%c3%bc"`},
		{"item", `%"%C3%BC"`, ""},
		{"item", `%"%c3"`, ""},
		{"item", `%"%c"`, ""},
		{"item", `%"open`, ""},
		{"item", `%x`, ""},
		// An Item is one value, between spaces only.
		{"item", ` 42 `, `42`},
		{"item", `42 x`, ""},
		{"item", `42,43`, ""},
		{"item", `(1 2)`, ""},
		{"item", ``, ""},
	})
	l, ok := ParseList("")
	assert.True(t, ok)
	assert.Empty(t, l)
}

// TestParseBounds: the members, parameters and length the parser takes,
// which are RFC 9651's minimums, and one more, which it refuses.
func TestParseBounds(t *testing.T) {
	members := strings.Repeat("1,", maxMembers-1) + "1"
	_, ok := ParseList(members)
	assert.True(t, ok, "%d members", maxMembers)
	_, ok = ParseList(members + ",1")
	assert.False(t, ok, "%d members", maxMembers+1)
	_, ok = ParseList("(" + strings.Repeat("1 ", maxMembers) + "1)")
	assert.False(t, ok, "an inner list of %d items", maxMembers+1)
	_, ok = ParseDictionary(dictKeys(maxMembers))
	assert.True(t, ok, "a dictionary of %d members", maxMembers)
	_, ok = ParseDictionary(dictKeys(maxMembers + 1))
	assert.False(t, ok, "a dictionary of %d members", maxMembers+1)

	params := ""
	for i := range maxParams {
		params += ";k" + strconv.Itoa(i)
	}
	_, ok = ParseItem("1" + params)
	assert.True(t, ok, "%d parameters", maxParams)
	_, ok = ParseItem("1" + params + ";x")
	assert.False(t, ok, "%d parameters", maxParams+1)

	long := `"` + strings.Repeat("a", maxFieldLen-2) + `"`
	_, ok = ParseItem(long)
	assert.True(t, ok, "a field of %d bytes", len(long))
	_, ok = ParseItem(long + " ")
	assert.False(t, ok, "a field of %d bytes", len(long)+1)

	_, ok = JoinLines([]string{long[:maxFieldLen/2], long[:maxFieldLen/2-2]})
	assert.True(t, ok, "two lines of %d bytes joined", maxFieldLen)
	_, ok = JoinLines([]string{long[:maxFieldLen/2], long[:maxFieldLen/2-1]})
	assert.False(t, ok, "two lines of %d bytes joined", maxFieldLen+1)
}

// dictKeys returns a Dictionary of n members with keys of three letters.
func dictKeys(n int) string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = string([]byte{'a' + byte(i/676), 'a' + byte(i/26%26), 'a' + byte(i%26)})
	}
	return strings.Join(keys, ", ")
}

// FuzzParse: no input makes the parser panic, and what it accepts it
// writes back in a form that parses to the same value.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`"default";r=9;t=1`, `"default";q=10;w=2`, `limit=100, remaining=50, reset=5`,
		`("foo" "bar");lvl=5`, `a=(1 2), b=3, c=4;aa=bb`, `:aGVsbG8=:`, `%"%c3%bc"`, `@-1`, `1.5`, `?0`,
	} {
		for typ := range byte(3) {
			f.Add(typ, s)
		}
	}
	f.Fuzz(func(t *testing.T, typ byte, v string) {
		kind := [...]string{"list", "dict", "item"}[typ%3]
		out, ok := parseAs(kind, v)
		if !ok {
			return
		}
		again, ok := parseAs(kind, out)
		require.True(t, ok, "parse %s %q gave %q, which does not parse", kind, v, out)
		require.Equal(t, out, again, "parse %s %q", kind, v)
	})
}

// The writers' output parses back to what they were given.
func TestAppend(t *testing.T) {
	for _, s := range []string{"default", "daily-bytes", `a"b`, `back\slash`, "", "x y"} {
		it, ok := ParseItem(string(AppendString(nil, s)))
		require.True(t, ok, "%q", s)
		assert.Equal(t, Bare{Kind: String, S: s}, it.Bare)
	}
	for n, want := range map[int64]int64{0: 0, 42: 42, -5: 0, MaxInteger + 1: MaxInteger, 1 << 62: MaxInteger} {
		it, ok := ParseItem(string(AppendInteger(nil, n)))
		require.True(t, ok, "%d", n)
		assert.Equal(t, Bare{Kind: Integer, N: want}, it.Bare, "%d", n)
	}
}
