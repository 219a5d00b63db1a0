package clientkey_test

import (
	"errors"
	"strings"
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
		got, err := sentinels.FromIP(addr, bits)
		require.NoError(t, err, addr)
		assert.Equal(t, want, got, "IP(%q, %d)", addr, bits)
	}
	for _, bad := range []string{"", "garbage", "0.0.0.0", "1.2.3.4:99999"} {
		_, err := sentinels.FromIP(bad, bits)
		assert.ErrorIs(t, err, errBad, "%q", bad)
	}
}

func TestIPv6Bits(t *testing.T) {
	for prefix, want := range map[int]int{0: 64, 1: 1, 56: 56, 64: 64, 127: 127, 128: 0} {
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

type stringer string

func (s stringer) String() string { return string(s) }

// User takes the types of ID that authentication libraries store, and one
// ID is one key whatever its type.
func TestUser(t *testing.T) {
	uuid := [16]byte{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00}
	for _, tc := range []struct {
		v    any
		want string
	}{
		{"u-42", "user:u-42"},
		{"42", "user:42"},
		{42, "user:42"},
		{int8(-42), "user:-42"},
		{int16(42), "user:42"},
		{int32(42), "user:42"},
		{int64(42), "user:42"},
		{uint(42), "user:42"},
		{uint8(42), "user:42"},
		{uint16(42), "user:42"},
		{uint32(42), "user:42"},
		{uint64(18446744073709551615), "user:18446744073709551615"},
		{uintptr(42), "user:42"},
		{stringer("42"), "user:42"},
		{uuid, "user:123e4567-e89b-12d3-a456-426614174000"},
	} {
		got, err := sentinels.FromUser(tc.v)
		require.NoError(t, err, "User(%T %v)", tc.v, tc.v)
		assert.Equal(t, tc.want, got, "User(%T %v)", tc.v, tc.v)
	}
	for _, tc := range []struct {
		v      any
		detail string
	}{
		{nil, "the request carries no user ID in its context"},
		{"", "the user ID in the request's context is empty"},
		{stringer(""), "the user ID in the request's context is empty"},
	} {
		_, err := sentinels.FromUser(tc.v)
		require.ErrorIs(t, err, errMissing, "User(%T)", tc.v)
		var ce *clientkey.Error
		require.ErrorAs(t, err, &ce, "User(%T)", tc.v)
		assert.Equal(t, tc.detail, ce.Detail, "User(%T)", tc.v)
		assert.Equal(t, clientkey.KindMissingKey, ce.Kind, "User(%T)", tc.v)
		assert.Equal(t, "Bearer", ce.Challenge, "User(%T)", tc.v)
		assert.NotContains(t, err.Error(), "sk_secret", "never the value")
	}
}

// A user ID of another type is the server's mistake: not ErrMissingKey,
// which would blame the client, but an error of its own kind whose text
// names the type, never the value.
func TestUserUnusableType(t *testing.T) {
	for _, tc := range []struct {
		v    any
		text string
	}{
		{map[string]int{"sk_secret": 1}, "ratelimit: the user ID in the request's context is a map[string]int, not a string, integer, fmt.Stringer or [16]byte"},
		{4.2, "ratelimit: the user ID in the request's context is a float64, not a string, integer, fmt.Stringer or [16]byte"},
		{[]byte("sk_secret"), "ratelimit: the user ID in the request's context is a []uint8, not a string, integer, fmt.Stringer or [16]byte"},
		{[15]byte{}, "ratelimit: the user ID in the request's context is a [15]uint8, not a string, integer, fmt.Stringer or [16]byte"},
		{[16]int8{}, "ratelimit: the user ID in the request's context is a [16]int8, not a string, integer, fmt.Stringer or [16]byte"},
	} {
		_, err := sentinels.FromUser(tc.v)
		assert.EqualError(t, err, tc.text, "User(%T)", tc.v)
		assert.NotErrorIs(t, err, errMissing, "User(%T)", tc.v)
		assert.NotErrorIs(t, err, errBad, "User(%T)", tc.v)
		var ce *clientkey.Error
		require.ErrorAs(t, err, &ce, "User(%T)", tc.v)
		assert.Equal(t, clientkey.KindUserIDType, ce.Kind, "User(%T)", tc.v)
	}
}

// Named types of the types User takes are IDs like their underlying
// values: UserID("42") is "42" is 42.
func TestUserNamedTypes(t *testing.T) {
	type (
		userID string
		id     int64
		uid    uint8
		uuid   [16]byte
	)
	for _, tc := range []struct {
		v    any
		want string
	}{
		{userID("42"), "user:42"},
		{id(42), "user:42"},
		{id(-42), "user:-42"},
		{uid(42), "user:42"},
		{uuid{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00}, "user:123e4567-e89b-12d3-a456-426614174000"},
		{userID(strings.Repeat("x", clientkey.MaxUserIDLen+1)), clientkey.Hash("user#:", strings.Repeat("x", clientkey.MaxUserIDLen+1))},
	} {
		got, err := sentinels.FromUser(tc.v)
		require.NoError(t, err, "User(%T %v)", tc.v, tc.v)
		assert.Equal(t, tc.want, got, "User(%T %v)", tc.v, tc.v)
	}
	_, err := sentinels.FromUser(userID(""))
	assert.ErrorIs(t, err, errMissing, "an empty named ID")
}

// IP's refusal explains itself without the address it could not parse.
func TestIPDetail(t *testing.T) {
	_, err := sentinels.FromIP("sk_secret", 0)
	var ce *clientkey.Error
	require.ErrorAs(t, err, &ce)
	assert.ErrorIs(t, err, errBad)
	assert.Equal(t, "the request's client address is not an IP address", ce.Detail)
	assert.Equal(t, clientkey.KindClientIP, ce.Kind)
}

// TestHash: the prefix, then 22 characters of base64url SHA-256, whatever
// the prefix's length (one past the stack buffer included).
func TestHash(t *testing.T) {
	// The first 16 bytes of SHA-256("x"), in unpadded base64url.
	const digest = "LXEWQrcmsEQBYnyp-6wy9Q" // echo -n x | sha256sum, first 16 bytes, base64url
	for _, prefix := range []string{"", "ak:", "user#:", "tenant-key:", strings.Repeat("p", 40)} {
		assert.Equal(t, prefix+digest, clientkey.Hash(prefix, "x"), "prefix %q", prefix)
	}
}

var (
	errMissing = errors.New("missing")
	errBad     = errors.New("bad")
	sentinels  = clientkey.Keys{MissingKey: errMissing, BadRequest: errBad}
)
