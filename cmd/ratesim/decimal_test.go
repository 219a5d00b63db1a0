package main

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSeconds(t *testing.T) {
	for s, want := range map[string]int64{
		"0":                     0,
		"3":                     3e9,
		"0.2":                   200e6,
		"1.000000001":           1e9 + 1,
		"0.000000001":           1,
		".5":                    500e6,
		"2.":                    2e9,
		"007.50":                7500e6,
		"0.1000000000000":       100e6,
		"999999999.999999999":   999999999999999999,
		"1000000000":            1e18,
		"1000000000.0000000000": 1e18,
	} {
		got, err := parseSeconds([]byte(s))
		require.NoError(t, err, "parseSeconds(%q)", s)
		assert.Equal(t, want, got, "parseSeconds(%q)", s)
	}
	for s, want := range map[string]string{
		"":                     "not a decimal number of seconds",
		".":                    "not a decimal number of seconds",
		"-0":                   "negative time",
		"-1.5":                 "negative time",
		"+1":                   "not a decimal number of seconds",
		"1e3":                  "not a decimal number of seconds",
		"1,5":                  "not a decimal number of seconds",
		"1.2.3":                "not a decimal number of seconds",
		"0x10":                 "not a decimal number of seconds",
		"1_000":                "not a decimal number of seconds",
		"Inf":                  "not a decimal number of seconds",
		"1 ":                   "not a decimal number of seconds",
		"0.0000000001":         "finer than a nanosecond",
		"1.0000000005":         "finer than a nanosecond",
		"1000000000.000000001": "more than 1000000000 seconds",
		"1000000001":           "more than 1000000000 seconds",
		"18446744073709551617": "more than 1000000000 seconds",
	} {
		_, err := parseSeconds([]byte(s))
		if assert.Error(t, err, "parseSeconds(%q)", s) {
			assert.Equal(t, want, err.Error(), "parseSeconds(%q)", s)
		}
	}
}

func TestAppendSeconds(t *testing.T) {
	for ns, want := range map[int64]string{
		0:                   "0",
		1:                   "0.000000001",
		200e6:               "0.2",
		2e9:                 "2",
		1e9 + 1:             "1.000000001",
		123456789:           "0.123456789",
		120e6:               "0.12",
		-200e6:              "-0.2",
		1<<63 - 1:           "9223372036.854775807",
		-1 << 63:            "-9223372036.854775808",
		999999999999999999:  "999999999.999999999",
		1000000000000000000: "1000000000",
	} {
		assert.Equal(t, want, formatSeconds(ns), "formatSeconds(%d)", ns)
	}
}

// Formatting and parsing are inverse over the whole range of trace times.
func TestSecondsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		ns := r.Int64N(maxSeconds*1e9 + 1)
		if r.IntN(2) == 0 {
			ns = ns / 1e6 * 1e6 // fewer decimals
		}
		got, err := parseSeconds(appendSeconds(nil, ns))
		require.NoError(t, err, formatSeconds(ns))
		require.Equal(t, ns, got, formatSeconds(ns))
	}
}

func TestParseCount(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "1": 1, "007": 7, "9223372036854775807": 1<<63 - 1} {
		got, err := parseCount([]byte(s))
		require.NoError(t, err, s)
		assert.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "-1", "+1", "1.0", "1e3", "9223372036854775808", "99999999999999999999"} {
		_, err := parseCount([]byte(s))
		assert.Error(t, err, "%q", s)
	}
}
