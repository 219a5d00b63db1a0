package main

import (
	"errors"
	"strconv"
)

// maxSeconds is the latest time a trace may name, in seconds (about 31.7
// years). It keeps every sum the algorithms form from a time and a span
// (at most 50 years, the longest span a Limit may have, twice) inside
// int64.
const maxSeconds = 1_000_000_000

// parseSeconds parses a non-negative decimal number of seconds ("3", "0.2",
// "1.000000001", ".5", "2.") exactly into nanoseconds, without a float.
// Fractional digits beyond the ninth must be zeros; signs, exponents and
// other characters are errors.
func parseSeconds(b []byte) (int64, error) {
	if len(b) > 0 && b[0] == '-' {
		return 0, errors.New("negative time")
	}
	var sec, frac int64
	i, intDigits, fracDigits := 0, 0, 0
	for ; i < len(b) && isDigit(b[i]); i++ {
		if sec <= maxSeconds {
			sec = sec*10 + int64(b[i]-'0')
		}
		intDigits++
	}
	if i < len(b) && b[i] == '.' {
		for i++; i < len(b) && isDigit(b[i]); i++ {
			if fracDigits < 9 {
				frac = frac*10 + int64(b[i]-'0')
			} else if b[i] != '0' {
				return 0, errors.New("finer than a nanosecond")
			}
			fracDigits++
		}
	}
	if i != len(b) || intDigits+fracDigits == 0 {
		return 0, errors.New("not a decimal number of seconds")
	}
	if sec > maxSeconds || sec == maxSeconds && frac > 0 {
		return 0, errors.New("more than " + strconv.Itoa(maxSeconds) + " seconds")
	}
	for ; fracDigits < 9; fracDigits++ {
		frac *= 10
	}
	return sec*1e9 + frac, nil
}

// parseCount parses a non-negative decimal integer, such as a cost.
func parseCount(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, errors.New("empty")
	}
	if b[0] == '-' {
		return 0, errors.New("negative")
	}
	var n int64
	for _, c := range b {
		if !isDigit(c) {
			return 0, errors.New("not a whole number")
		}
		d := int64(c - '0')
		if n > (1<<63-1-d)/10 {
			return 0, errors.New("too large")
		}
		n = n*10 + d
	}
	return n, nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// appendSeconds appends ns nanoseconds as an exact decimal number of seconds
// with no trailing zeros: "0", "0.2", "2", "0.000000001".
func appendSeconds(dst []byte, ns int64) []byte {
	u := uint64(ns)
	if ns < 0 {
		dst = append(dst, '-')
		u = -u
	}
	dst = strconv.AppendUint(dst, u/1e9, 10)
	frac := u % 1e9
	if frac == 0 {
		return dst
	}
	var digits [10]byte
	digits[0] = '.'
	for i := 9; i >= 1; i-- {
		digits[i] = byte('0' + frac%10)
		frac /= 10
	}
	n := 10
	for digits[n-1] == '0' {
		n--
	}
	return append(dst, digits[:n]...)
}

// formatSeconds is appendSeconds for a string.
func formatSeconds(ns int64) string { return string(appendSeconds(nil, ns)) }
