package pace

import (
	"encoding/base64"
	"strings"
	"unicode/utf8"
)

// This file parses Structured Field Values (RFC 9651): Lists, Dictionaries
// and Items with parameters, with every bare item type, following the
// RFC's parsing algorithms (§4.2) step by step. A field that does not
// parse is ignored whole, as the RFC requires. The parser is bounded: a
// field value longer than maxFieldLen, or with more members, inner list
// items or parameters than the RFC requires parsers to support, is
// refused like a malformed one.

// Bounds of the parser: the field value's length, and RFC 9651 §3's
// minimums for members of a List or Dictionary, items of an Inner List
// and parameters of an Item.
const (
	maxFieldLen = 8192
	maxMembers  = 1024
	maxParams   = 256
)

// sfKind is the type of a bare item.
type sfKind uint8

const (
	sfInteger sfKind = iota + 1
	sfDecimal        // n is the value in thousandths
	sfString
	sfToken
	sfBytes   // s holds the decoded bytes
	sfBoolean // n is 0 or 1
	sfDate    // n is Unix seconds
	sfDisplay // s holds the decoded UTF-8 text
	sfInner   // an Inner List, in sfItem.inner
)

// sfBare is a bare item: an Integer, Decimal, Boolean or Date in n, a
// String, Token, Byte Sequence or Display String in s.
type sfBare struct {
	kind sfKind
	n    int64
	s    string
}

// sfParam is one parameter of an Item or Inner List.
type sfParam struct {
	key string
	val sfBare
}

// sfItem is an Item, or an Inner List (bare.kind sfInner), with its
// parameters in order, each key once.
type sfItem struct {
	bare   sfBare
	inner  []sfItem
	params []sfParam
}

// param returns the value of the parameter key, if present.
func (it *sfItem) param(key string) (sfBare, bool) {
	for _, p := range it.params {
		if p.key == key {
			return p.val, true
		}
	}
	return sfBare{}, false
}

// sfMember is a member of a Dictionary.
type sfMember struct {
	key string
	sfItem
}

// sfParser holds what is left of the field value to parse.
type sfParser struct{ s string }

// joinLines returns the field lines as one value, joined as RFC 9651 §4.2
// combines them, and false when it is longer than maxFieldLen.
func joinLines(lines []string) (string, bool) {
	n := 0
	for _, l := range lines {
		n += len(l) + 2
	}
	if n > maxFieldLen+2 {
		return "", false
	}
	return strings.Join(lines, ", "), true
}

// parseList parses a field value as a List.
func parseList(v string) ([]sfItem, bool) {
	p, ok := newParser(v)
	if !ok {
		return nil, false
	}
	var members []sfItem
	for p.s != "" {
		if len(members) == maxMembers {
			return nil, false
		}
		it, ok := p.itemOrInnerList()
		if !ok {
			return nil, false
		}
		members = append(members, it)
		if !p.next() {
			return nil, false
		}
	}
	return members, true
}

// parseDictionary parses a field value as a Dictionary. A key given twice
// keeps its first place and its last value.
func parseDictionary(v string) ([]sfMember, bool) {
	p, ok := newParser(v)
	if !ok {
		return nil, false
	}
	var members []sfMember
	for p.s != "" {
		key, ok := p.key()
		if !ok {
			return nil, false
		}
		var m sfMember
		m.key = key
		if p.peek() == '=' {
			p.s = p.s[1:]
			if m.sfItem, ok = p.itemOrInnerList(); !ok {
				return nil, false
			}
		} else {
			m.bare = sfBare{kind: sfBoolean, n: 1}
			if m.params, ok = p.params(); !ok {
				return nil, false
			}
		}
		if i := indexMember(members, key); i >= 0 {
			members[i] = m
		} else if len(members) == maxMembers {
			return nil, false
		} else {
			members = append(members, m)
		}
		if !p.next() {
			return nil, false
		}
	}
	return members, true
}

func indexMember(ms []sfMember, key string) int {
	for i := range ms {
		if ms[i].key == key {
			return i
		}
	}
	return -1
}

// parseItem parses a field value as an Item.
func parseItem(v string) (sfItem, bool) {
	p, ok := newParser(v)
	if !ok {
		return sfItem{}, false
	}
	it, ok := p.item()
	if !ok || p.s != "" {
		return sfItem{}, false
	}
	return it, true
}

// newParser starts parsing v: RFC 9651 §4.2 steps 1, 2 and 4 (only
// ASCII, leading and trailing spaces discarded).
func newParser(v string) (sfParser, bool) {
	if len(v) > maxFieldLen {
		return sfParser{}, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] >= 0x80 {
			return sfParser{}, false
		}
	}
	return sfParser{s: strings.Trim(v, " ")}, true
}

func (p *sfParser) peek() byte {
	if p.s == "" {
		return 0
	}
	return p.s[0]
}

// next consumes what follows a List or Dictionary member: the end, or a
// comma between optional whitespace and another member.
func (p *sfParser) next() bool {
	p.s = strings.TrimLeft(p.s, " \t")
	if p.s == "" {
		return true
	}
	if p.s[0] != ',' {
		return false
	}
	p.s = strings.TrimLeft(p.s[1:], " \t")
	return p.s != "" // a trailing comma fails
}

func (p *sfParser) itemOrInnerList() (sfItem, bool) {
	if p.peek() == '(' {
		return p.innerList()
	}
	return p.item()
}

func (p *sfParser) innerList() (sfItem, bool) {
	p.s = p.s[1:] // '('
	var items []sfItem
	for p.s != "" {
		p.s = strings.TrimLeft(p.s, " ")
		if p.peek() == ')' {
			p.s = p.s[1:]
			params, ok := p.params()
			return sfItem{bare: sfBare{kind: sfInner}, inner: items, params: params}, ok
		}
		if len(items) == maxMembers {
			return sfItem{}, false
		}
		it, ok := p.item()
		if !ok {
			return sfItem{}, false
		}
		items = append(items, it)
		if c := p.peek(); c != ' ' && c != ')' {
			return sfItem{}, false
		}
	}
	return sfItem{}, false // no ')'
}

func (p *sfParser) item() (sfItem, bool) {
	b, ok := p.bareItem()
	if !ok {
		return sfItem{}, false
	}
	params, ok := p.params()
	return sfItem{bare: b, params: params}, ok
}

// params parses parameters; a key given twice keeps its first place and
// its last value.
func (p *sfParser) params() ([]sfParam, bool) {
	var params []sfParam
	for p.peek() == ';' {
		p.s = strings.TrimLeft(p.s[1:], " ")
		key, ok := p.key()
		if !ok {
			return nil, false
		}
		val := sfBare{kind: sfBoolean, n: 1}
		if p.peek() == '=' {
			p.s = p.s[1:]
			if val, ok = p.bareItem(); !ok {
				return nil, false
			}
		}
		i := 0
		for i < len(params) && params[i].key != key {
			i++
		}
		switch {
		case i < len(params):
			params[i].val = val
		case len(params) == maxParams:
			return nil, false
		case params == nil:
			params = make([]sfParam, 1, 4) // the fields' items have 2 to 4
			params[0] = sfParam{key, val}
		default:
			params = append(params, sfParam{key, val})
		}
	}
	return params, true
}

func (p *sfParser) key() (string, bool) {
	if c := p.peek(); !isLCAlpha(c) && c != '*' {
		return "", false
	}
	i := 1
	for i < len(p.s) && isKeyChar(p.s[i]) {
		i++
	}
	k := p.s[:i]
	p.s = p.s[i:]
	return k, true
}

func (p *sfParser) bareItem() (sfBare, bool) {
	switch c := p.peek(); {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.string()
	case c == '*' || isAlpha(c):
		return p.token(), true
	case c == ':':
		return p.byteSequence()
	case c == '?':
		return p.boolean()
	case c == '@':
		p.s = p.s[1:]
		b, ok := p.number()
		return sfBare{kind: sfDate, n: b.n}, ok && b.kind == sfInteger
	case c == '%':
		return p.displayString()
	}
	return sfBare{}, false
}

// number parses an Integer (at most 15 digits) or a Decimal (at most 12
// digits, a dot and 1 to 3 digits), exactly.
func (p *sfParser) number() (sfBare, bool) {
	neg := p.peek() == '-'
	if neg {
		p.s = p.s[1:]
	}
	if !isDigit(p.peek()) {
		return sfBare{}, false
	}
	var n int64
	digits, dot := 0, -1 // dot: the digits before the '.', if any
	i := 0
scan:
	for ; i < len(p.s); i++ {
		switch c := p.s[i]; {
		case isDigit(c):
			n = n*10 + int64(c-'0')
			digits++
		case c == '.' && dot < 0:
			if digits > 12 {
				return sfBare{}, false
			}
			dot = digits
		default:
			break scan
		}
		if digits > 15 { // an Integer's 15 digits, a Decimal's 16 characters
			return sfBare{}, false
		}
	}
	p.s = p.s[i:]
	if neg {
		n = -n
	}
	if dot < 0 {
		return sfBare{kind: sfInteger, n: n}, true
	}
	frac := digits - dot
	if frac < 1 || frac > 3 {
		return sfBare{}, false
	}
	for ; frac < 3; frac++ {
		n *= 10
	}
	return sfBare{kind: sfDecimal, n: n}, true
}

func (p *sfParser) string() (sfBare, bool) {
	// Most strings hold no escape and end where the first quote is.
	if end := strings.IndexAny(p.s[1:], `"\`); end >= 0 && p.s[1+end] == '"' {
		v := p.s[1 : 1+end]
		if printable(v) {
			p.s = p.s[2+end:]
			return sfBare{kind: sfString, s: v}, true
		}
		return sfBare{}, false
	}
	var b strings.Builder
	for i := 1; i < len(p.s); i++ {
		switch c := p.s[i]; {
		case c == '\\':
			i++
			if i == len(p.s) || p.s[i] != '"' && p.s[i] != '\\' {
				return sfBare{}, false
			}
			b.WriteByte(p.s[i])
		case c == '"':
			p.s = p.s[i+1:]
			return sfBare{kind: sfString, s: b.String()}, true
		case c < 0x20 || c >= 0x7f:
			return sfBare{}, false
		default:
			b.WriteByte(c)
		}
	}
	return sfBare{}, false // no closing quote
}

func (p *sfParser) token() sfBare {
	i := 1
	for i < len(p.s) && (isTChar(p.s[i]) || p.s[i] == ':' || p.s[i] == '/') {
		i++
	}
	t := p.s[:i]
	p.s = p.s[i:]
	return sfBare{kind: sfToken, s: t}
}

// byteSequence parses base64 between colons. As RFC 9651 §4.2.7 advises,
// missing padding and non-zero pad bits are accepted.
func (p *sfParser) byteSequence() (sfBare, bool) {
	end := strings.IndexByte(p.s[1:], ':')
	if end < 0 {
		return sfBare{}, false
	}
	b64 := p.s[1 : end+1]
	p.s = p.s[end+2:]
	data := strings.TrimRight(b64, "=")
	if pad := len(b64) - len(data); pad > 2 || pad > 0 && len(b64)%4 != 0 {
		return sfBare{}, false
	}
	for i := 0; i < len(data); i++ {
		if c := data[i]; !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' {
			return sfBare{}, false
		}
	}
	out, err := base64.RawStdEncoding.DecodeString(data)
	return sfBare{kind: sfBytes, s: string(out)}, err == nil
}

func (p *sfParser) boolean() (sfBare, bool) {
	if len(p.s) < 2 || p.s[1] != '0' && p.s[1] != '1' {
		return sfBare{}, false
	}
	b := sfBare{kind: sfBoolean, n: int64(p.s[1] - '0')}
	p.s = p.s[2:]
	return b, true
}

// displayString parses %"…": printable ASCII and %xx escapes in lower-case
// hex, which must decode to UTF-8.
func (p *sfParser) displayString() (sfBare, bool) {
	if len(p.s) < 2 || p.s[1] != '"' {
		return sfBare{}, false
	}
	var b []byte
	for i := 2; i < len(p.s); i++ {
		switch c := p.s[i]; {
		case c < 0x20 || c >= 0x7f:
			return sfBare{}, false
		case c == '%':
			if i+2 >= len(p.s) {
				return sfBare{}, false
			}
			hi, ok1 := lowerHex(p.s[i+1])
			lo, ok2 := lowerHex(p.s[i+2])
			if !ok1 || !ok2 {
				return sfBare{}, false
			}
			b = append(b, hi<<4|lo)
			i += 2
		case c == '"':
			p.s = p.s[i+1:]
			return sfBare{kind: sfDisplay, s: string(b)}, utf8.Valid(b)
		default:
			b = append(b, c)
		}
	}
	return sfBare{}, false
}

// printable reports whether s holds only printable ASCII and spaces.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case isDigit(c):
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func isDigit(c byte) bool   { return '0' <= c && c <= '9' }
func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || 'A' <= c && c <= 'Z' }

func isKeyChar(c byte) bool {
	return isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*'
}

// isTChar reports whether c is a tchar of RFC 9110 §5.6.2.
func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
