package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTotalLine(t *testing.T) {
	assert.Equal(t, "ratesim: 10 requests: 5 allowed, 5 denied\n", totalLine(keyStats{requests: 10, allowed: 5, refused: 5}))
	assert.Equal(t, "ratesim: 1 request: 0 allowed, 1 denied\n", totalLine(keyStats{requests: 1, refused: 1}))
}

// The per-key summary lists the keys with the most refusals first, at most
// -top of them.
func TestKeyTable(t *testing.T) {
	// rate 1, burst 2: a sends 5 at once (3 refused, in a row), b 4 (2),
	// c 4 spread out (0), "d e" cannot be a trace key, but "d\x01" can.
	trace := lines("0 a", 5) + lines("0 b", 4) + "0 c\n1 c\n2 c\n3 c\n4 d\x01\n4 d\x01\n4 d\x01\n"
	_, stderr, code := runCLI(t, trace, "-rate", "1", "-burst", "2")
	require.Equal(t, 0, code)
	assert.Equal(t, "ratesim: 16 requests: 10 allowed, 6 denied\n"+
		"key    requests  allowed  refused  refusal rate  longest refusal streak\n"+
		"a             5        2        3         60.0%                       3\n"+
		"b             4        2        2         50.0%                       2\n"+
		"d\\x01         3        2        1         33.3%                       1\n"+
		"c             4        4        0          0.0%                       0\n", stderr)

	_, stderr, _ = runCLI(t, trace, "-rate", "1", "-burst", "2", "-top", "2")
	rows := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	require.Len(t, rows, 5)
	assert.Equal(t, "top 2 of 4 keys by refusals (-top to show more):", rows[1])
	assert.True(t, strings.HasPrefix(rows[3], "a "), rows[3])
	assert.True(t, strings.HasPrefix(rows[4], "b "), rows[4])

	_, stderr, _ = runCLI(t, trace, "-rate", "1", "-burst", "2", "-top", "0")
	assert.Equal(t, "ratesim: 16 requests: 10 allowed, 6 denied\n", stderr)
}

func TestPrintable(t *testing.T) {
	assert.Equal(t, "plain", printable("plain"))
	assert.Equal(t, "日本", printable("日本"))
	assert.Equal(t, `a\x1b[31m`, printable("a\x1b[31m"))
	assert.Equal(t, `bad\xff`, printable("bad\xff"))
}
