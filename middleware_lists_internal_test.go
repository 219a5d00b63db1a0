package ratelimit

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPrefixSet compares prefixSet.contains, one lookup per prefix
// length, with a scan of every prefix.
func TestPrefixSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	addr := func() netip.Addr {
		if rng.IntN(2) == 0 {
			return netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(256)), byte(rng.IntN(256))})
		}
		return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, byte(rng.IntN(4)), 14: byte(rng.IntN(256)), 15: byte(rng.IntN(256))})
	}
	var entries []string
	var prefixes []netip.Prefix
	for range 200 {
		a := addr()
		p, err := a.Prefix(rng.IntN(a.BitLen() + 1))
		require.NoError(t, err)
		entries = append(entries, p.String())
		prefixes = append(prefixes, p)
	}
	s, err := newPrefixSet("test", entries)
	require.NoError(t, err)
	for range 10000 {
		a := addr()
		want := false
		for _, p := range prefixes {
			want = want || p.Contains(a)
		}
		assert.Equal(t, want, s.contains(a), "contains(%v)", a)
	}
}

func TestPrefixSetNormalises(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"203.0.113.99/24", "203.0.113.0/24"},
		{"203.0.113.7", "203.0.113.7/32"},
		{"::ffff:203.0.113.0/120", "203.0.113.0/24"},
		{"::ffff:203.0.113.7", "203.0.113.7/32"},
		{"2001:DB8::1/32", "2001:db8::/32"},
		{"fe80::1%eth0", "fe80::1/128"},
	}
	for _, tc := range tests {
		s, err := newPrefixSet("MiddlewareOptions.Block", []string{tc.in})
		require.NoError(t, err, "entry %q", tc.in)
		want := netip.MustParsePrefix(tc.want)
		assert.Contains(t, s.set, want, "entry %q", tc.in)
		assert.Len(t, s.set, 1, "entry %q", tc.in)
	}
}
