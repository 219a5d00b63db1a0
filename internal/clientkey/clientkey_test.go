package clientkey_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit/internal/clientkey"
)

func TestIP(t *testing.T) {
	bits, err := clientkey.IPv6Bits(64)
	require.NoError(t, err)
	for addr, want := range map[string]string{
		"203.0.113.7":        "ip:203.0.113.7",
		"203.0.113.7:443":    "ip:203.0.113.7",
		"::ffff:192.0.2.1":   "ip:192.0.2.1",
		"[2001:db8::1]:8080": "ip:2001:db8::/64",
		"fe80::1%eth0":       "ip:fe80::/64",
	} {
		got, err := clientkey.IP(addr, bits)
		require.NoError(t, err, addr)
		assert.Equal(t, want, got, "IP(%q, %d)", addr, bits)
	}
	for _, bad := range []string{"", "garbage", "0.0.0.0", "1.2.3.4:99999"} {
		_, err := clientkey.IP(bad, bits)
		assert.ErrorIs(t, err, clientkey.ErrNoClientIP, "%q", bad)
	}
}

func TestIPv6Bits(t *testing.T) {
	for prefix, want := range map[int]int{0: 0, 1: 1, 64: 64, 127: 127, 128: 0} {
		got, err := clientkey.IPv6Bits(prefix)
		if assert.NoError(t, err, "IPv6Bits(%d)", prefix) {
			assert.Equal(t, want, got, "IPv6Bits(%d)", prefix)
		}
	}
	for _, prefix := range []int{-1, 129} {
		_, err := clientkey.IPv6Bits(prefix)
		assert.Error(t, err, "IPv6Bits(%d)", prefix)
	}
}

func TestUser(t *testing.T) {
	k, err := clientkey.User("u-42")
	require.NoError(t, err)
	assert.Equal(t, "user:u-42", k)
	for _, v := range []any{nil, "", 42} {
		_, err := clientkey.User(v)
		assert.ErrorIs(t, err, clientkey.ErrMissingKey, "%v", v)
	}
}
