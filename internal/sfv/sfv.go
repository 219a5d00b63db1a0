// Package sfv reads and writes Structured Field Values (RFC 9651), the
// syntax of the IETF RateLimit and RateLimit-Policy fields: the root
// package writes them, pace reads them.
//
// The parser reads Lists, Dictionaries and Items with parameters, with
// every bare item type, following the RFC's parsing algorithms (§4.2) step
// by step. A field that does not parse is ignored whole, as the RFC
// requires. The parser is bounded: a field value longer than maxFieldLen,
// or with more members, inner list items or parameters than the RFC
// requires parsers to support, is refused like a malformed one. The
// writers append the few items the root writes: Strings and Integers.
package sfv

import (
	"slices"
	"strconv"
	"strings"
)

// Bounds of the parser: the field value's length, and RFC 9651 §3's
// minimums for members of a List or Dictionary, items of an Inner List
// and parameters of an Item.
const (
	maxFieldLen = 8192
	maxMembers  = 1024
	maxParams   = 256
)

// Kind is the type of a bare item.
type Kind uint8

const (
	Integer Kind = iota + 1
	Decimal      // n is the value in thousandths
	String
	Token
	Bytes   // s holds the decoded bytes
	Boolean // n is 0 or 1
	Date    // n is Unix seconds
	Display // s holds the decoded UTF-8 text
	Inner   // an Inner List, in sfItem.inner
)

// Bare is a bare item: an Integer, Decimal, Boolean or Date in n, a
// String, Token, Byte Sequence or Display String in s.
type Bare struct {
	Kind Kind
	N    int64
	S    string
}

// Param is one parameter of an Item or Inner List.
type Param struct {
	Key string
	Val Bare
}

// Item is an Item, or an Inner List (Bare.Kind Inner), with its
// parameters in order, each key once.
type Item struct {
	Bare   Bare
	Inner  []Item
	Params []Param
}

// Param returns the value of the parameter key, if present.
func (it *Item) Param(key string) (Bare, bool) {
	for _, p := range it.Params {
		if p.Key == key {
			return p.Val, true
		}
	}
	return Bare{}, false
}

// Member is a member of a Dictionary.
type Member struct {
	Key string
	Item
}

// JoinLines returns the field lines as one value, joined as RFC 9651 §4.2
// combines them, and false when it is longer than maxFieldLen.
func JoinLines(lines []string) (string, bool) {
	n := 0
	for _, l := range lines {
		n += len(l) + 2
	}
	if n > maxFieldLen+2 {
		return "", false
	}
	return strings.Join(lines, ", "), true
}

// ParseList parses a field value as a List.
func ParseList(v string) ([]Item, bool) {
	p, ok := newParser(v)
	if !ok {
		return nil, false
	}
	var members []Item
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

// ParseDictionary parses a field value as a Dictionary. A key given twice
// keeps its first place and its last value.
func ParseDictionary(v string) ([]Member, bool) {
	p, ok := newParser(v)
	if !ok {
		return nil, false
	}
	var members []Member
	for p.s != "" {
		key, ok := p.key()
		if !ok {
			return nil, false
		}
		var m Member
		m.Key = key
		if p.peek() == '=' {
			p.s = p.s[1:]
			if m.Item, ok = p.itemOrInnerList(); !ok {
				return nil, false
			}
		} else {
			m.Bare = Bare{Kind: Boolean, N: 1}
			if m.Params, ok = p.params(); !ok {
				return nil, false
			}
		}
		if i := slices.IndexFunc(members, func(m Member) bool { return m.Key == key }); i >= 0 {
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

// ParseItem parses a field value as an Item.
func ParseItem(v string) (Item, bool) {
	p, ok := newParser(v)
	if !ok {
		return Item{}, false
	}
	it, ok := p.item()
	if !ok || p.s != "" {
		return Item{}, false
	}
	return it, true
}

// IsTChar reports whether c is a tchar of RFC 9110 §5.6.2.
func IsTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// MaxInteger is the largest Integer a Structured Field carries.
const MaxInteger = 999_999_999_999_999

// Clamp returns n clamped to [0, MaxInteger]: the counts and seconds the
// root writes are never negative.
func Clamp(n int64) int64 { return min(max(n, 0), MaxInteger) }

// AppendInteger appends n as an Integer, clamped (Clamp).
func AppendInteger(b []byte, n int64) []byte { return strconv.AppendInt(b, Clamp(n), 10) }

// AppendString appends s as a String: quoted, with '"' and '\\'
// escaped. s must be printable ASCII, as the root's policy names and
// units are (validated where they are made).
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}
