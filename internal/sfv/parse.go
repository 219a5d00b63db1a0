package sfv

// The parser of RFC 9651 §4.2, on one field value.

import (
	"encoding/base64"
	"strings"
	"unicode/utf8"
)

// parser holds what is left of the field value to parse.
type parser struct{ s string }

// newParser starts parsing v: RFC 9651 §4.2 steps 1, 2 and 4 (only
// ASCII, leading and trailing spaces discarded).
func newParser(v string) (parser, bool) {
	if len(v) > maxFieldLen {
		return parser{}, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] >= 0x80 {
			return parser{}, false
		}
	}
	return parser{s: strings.Trim(v, " ")}, true
}

func (p *parser) peek() byte {
	if p.s == "" {
		return 0
	}
	return p.s[0]
}

// next consumes what follows a List or Dictionary member: the end, or a
// comma between optional whitespace and another member.
func (p *parser) next() bool {
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

func (p *parser) itemOrInnerList() (Item, bool) {
	if p.peek() == '(' {
		return p.innerList()
	}
	return p.item()
}

func (p *parser) innerList() (Item, bool) {
	p.s = p.s[1:] // '('
	var items []Item
	for p.s != "" {
		p.s = strings.TrimLeft(p.s, " ")
		if p.peek() == ')' {
			p.s = p.s[1:]
			params, ok := p.params()
			return Item{Bare: Bare{Kind: Inner}, Inner: items, Params: params}, ok
		}
		if len(items) == maxMembers {
			return Item{}, false
		}
		it, ok := p.item()
		if !ok {
			return Item{}, false
		}
		items = append(items, it)
		if c := p.peek(); c != ' ' && c != ')' {
			return Item{}, false
		}
	}
	return Item{}, false // no ')'
}

func (p *parser) item() (Item, bool) {
	b, ok := p.bareItem()
	if !ok {
		return Item{}, false
	}
	params, ok := p.params()
	return Item{Bare: b, Params: params}, ok
}

// params parses parameters; a key given twice keeps its first place and
// its last value.
func (p *parser) params() ([]Param, bool) {
	var params []Param
	for p.peek() == ';' {
		p.s = strings.TrimLeft(p.s[1:], " ")
		key, ok := p.key()
		if !ok {
			return nil, false
		}
		val := Bare{Kind: Boolean, N: 1}
		if p.peek() == '=' {
			p.s = p.s[1:]
			if val, ok = p.bareItem(); !ok {
				return nil, false
			}
		}
		i := 0
		for i < len(params) && params[i].Key != key {
			i++
		}
		switch {
		case i < len(params):
			params[i].Val = val
		case len(params) == maxParams:
			return nil, false
		case params == nil:
			params = make([]Param, 1, 4) // the fields' items have 2 to 4
			params[0] = Param{key, val}
		default:
			params = append(params, Param{key, val})
		}
	}
	return params, true
}

func (p *parser) key() (string, bool) {
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

func (p *parser) bareItem() (Bare, bool) {
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
		return Bare{Kind: Date, N: b.N}, ok && b.Kind == Integer
	case c == '%':
		return p.displayString()
	}
	return Bare{}, false
}

// number parses an Integer (at most 15 digits) or a Decimal (at most 12
// digits, a dot and 1 to 3 digits), exactly.
func (p *parser) number() (Bare, bool) {
	neg := p.peek() == '-'
	if neg {
		p.s = p.s[1:]
	}
	if !isDigit(p.peek()) {
		return Bare{}, false
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
				return Bare{}, false
			}
			dot = digits
		default:
			break scan
		}
		if digits > 15 { // an Integer's 15 digits, a Decimal's 16 characters
			return Bare{}, false
		}
	}
	p.s = p.s[i:]
	if neg {
		n = -n
	}
	if dot < 0 {
		return Bare{Kind: Integer, N: n}, true
	}
	frac := digits - dot
	if frac < 1 || frac > 3 {
		return Bare{}, false
	}
	for ; frac < 3; frac++ {
		n *= 10
	}
	return Bare{Kind: Decimal, N: n}, true
}

func (p *parser) string() (Bare, bool) {
	// Most strings hold no escape and end where the first quote is.
	if end := strings.IndexAny(p.s[1:], `"\`); end >= 0 && p.s[1+end] == '"' {
		v := p.s[1 : 1+end]
		if printable(v) {
			p.s = p.s[2+end:]
			return Bare{Kind: String, S: v}, true
		}
		return Bare{}, false
	}
	var b strings.Builder
	for i := 1; i < len(p.s); i++ {
		switch c := p.s[i]; {
		case c == '\\':
			i++
			if i == len(p.s) || p.s[i] != '"' && p.s[i] != '\\' {
				return Bare{}, false
			}
			b.WriteByte(p.s[i])
		case c == '"':
			p.s = p.s[i+1:]
			return Bare{Kind: String, S: b.String()}, true
		case c < 0x20 || c >= 0x7f:
			return Bare{}, false
		default:
			b.WriteByte(c)
		}
	}
	return Bare{}, false // no closing quote
}

func (p *parser) token() Bare {
	i := 1
	for i < len(p.s) && (IsTChar(p.s[i]) || p.s[i] == ':' || p.s[i] == '/') {
		i++
	}
	t := p.s[:i]
	p.s = p.s[i:]
	return Bare{Kind: Token, S: t}
}

// byteSequence parses base64 between colons. As RFC 9651 §4.2.7 advises,
// missing padding and non-zero pad bits are accepted.
func (p *parser) byteSequence() (Bare, bool) {
	end := strings.IndexByte(p.s[1:], ':')
	if end < 0 {
		return Bare{}, false
	}
	b64 := p.s[1 : end+1]
	p.s = p.s[end+2:]
	data := strings.TrimRight(b64, "=")
	if pad := len(b64) - len(data); pad > 2 || pad > 0 && len(b64)%4 != 0 {
		return Bare{}, false
	}
	for i := 0; i < len(data); i++ {
		if c := data[i]; !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' {
			return Bare{}, false
		}
	}
	out, err := base64.RawStdEncoding.DecodeString(data)
	return Bare{Kind: Bytes, S: string(out)}, err == nil
}

func (p *parser) boolean() (Bare, bool) {
	if len(p.s) < 2 || p.s[1] != '0' && p.s[1] != '1' {
		return Bare{}, false
	}
	b := Bare{Kind: Boolean, N: int64(p.s[1] - '0')}
	p.s = p.s[2:]
	return b, true
}

// displayString parses %"…": printable ASCII and %xx escapes in lower-case
// hex, which must decode to UTF-8.
func (p *parser) displayString() (Bare, bool) {
	if len(p.s) < 2 || p.s[1] != '"' {
		return Bare{}, false
	}
	var b []byte
	for i := 2; i < len(p.s); i++ {
		switch c := p.s[i]; {
		case c < 0x20 || c >= 0x7f:
			return Bare{}, false
		case c == '%':
			if i+2 >= len(p.s) {
				return Bare{}, false
			}
			hi, ok1 := lowerHex(p.s[i+1])
			lo, ok2 := lowerHex(p.s[i+2])
			if !ok1 || !ok2 {
				return Bare{}, false
			}
			b = append(b, hi<<4|lo)
			i += 2
		case c == '"':
			p.s = p.s[i+1:]
			return Bare{Kind: Display, S: string(b)}, utf8.Valid(b)
		default:
			b = append(b, c)
		}
	}
	return Bare{}, false
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

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }

func isAlpha(c byte) bool { return isLCAlpha(c) || 'A' <= c && c <= 'Z' }

func isKeyChar(c byte) bool {
	return isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*'
}
