package ratelimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit/internal/clientkey"
)

// ipCase is one request given to a KeyFunc built by KeyByIP.
type ipCase struct {
	name    string
	opts    *IPOptions
	remote  string
	header  string   // the forwarding header's name
	lines   []string // its lines, in order
	want    string
	wantErr error
}

func runIPCases(t *testing.T, cases []ipCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Helper()
			kf, err := KeyByIP(tc.opts)
			require.NoError(t, err, "KeyByIP()")
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.remote
			for _, l := range tc.lines {
				r.Header.Add(tc.header, l)
			}
			got, err := kf(r)
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr, "key(RemoteAddr %q, %s %q) = %q, %v, want error %v",
					tc.remote, tc.header, tc.lines, got, err, tc.wantErr)
				assert.Empty(t, got, "key with an error")
				return
			}
			if assert.NoError(t, err, "key(RemoteAddr %q, %s %q)", tc.remote, tc.header, tc.lines) {
				assert.Equal(t, tc.want, got, "key(RemoteAddr %q, %s %q) = %q, want %q",
					tc.remote, tc.header, tc.lines, got, tc.want)
			}
		})
	}
}

// trust returns the options that trust cidrs, keying IPv6 clients by
// address (IPv6Prefix 128), so that the tests of the walk see the address
// found.
func trust(cidrs ...string) *IPOptions { return &IPOptions{TrustedProxies: cidrs, IPv6Prefix: 128} }

// V14 and RemoteAddr parsing.
func TestKeyByIPNormalization(t *testing.T) {
	p64 := &IPOptions{IPv6Prefix: 64}
	p128 := &IPOptions{IPv6Prefix: 128}
	runIPCases(t, []ipCase{
		{name: "IPv4 with port", remote: "192.0.2.1:1234", want: "ip:192.0.2.1"},
		{name: "bare IPv4", remote: "192.0.2.1", want: "ip:192.0.2.1"},
		{name: "IPv6 with port", opts: p128, remote: "[2001:DB8::1]:1234", want: "ip:2001:db8::1"},
		{name: "bare IPv6", opts: p128, remote: "2001:db8::1", want: "ip:2001:db8::1"},
		{name: "IPv6 full form", opts: p128, remote: "[2001:0db8:0000:0000:0000:0000:0000:0001]:1", want: "ip:2001:db8::1"},
		{name: "IPv6 /64", opts: p64, remote: "[2001:DB8::1]:1234", want: "ip:2001:db8::/64"},
		{name: "IPv6 /64 same subscriber", opts: p64, remote: "[2001:db8::ffff:1]:1", want: "ip:2001:db8::/64"},
		{name: "IPv6 /64 with subnet", opts: p64, remote: "[2001:db8:1:2:3:4:5:6]:1", want: "ip:2001:db8:1:2::/64"},
		{name: "IPv6 /0 is /64", opts: &IPOptions{IPv6Prefix: 0}, remote: "[2001:db8::1]:1", want: "ip:2001:db8::/64"},
		{name: "IPv6 by default /64", remote: "[2001:db8:1:2:3:4:5:6]:1", want: "ip:2001:db8:1:2::/64"},
		{name: "forwarded IPv6 by default /64", opts: &IPOptions{TrustedProxies: []string{"10.0.0.0/8"}}, remote: "10.0.0.5:1",
			header: "X-Forwarded-For", lines: []string{"2001:db8:1:2::7"}, want: "ip:2001:db8:1:2::/64"},
		{name: "IPv6 /128 is no grouping", opts: &IPOptions{IPv6Prefix: 128}, remote: "[2001:db8::1]:1", want: "ip:2001:db8::1"},
		{name: "IPv6 /48", opts: &IPOptions{IPv6Prefix: 48}, remote: "[2001:db8:1:2::1]:1", want: "ip:2001:db8:1::/48"},
		{name: "IPv6 /1", opts: &IPOptions{IPv6Prefix: 1}, remote: "[2001:db8::1]:1", want: "ip:::/1"},
		{name: "Envoy /64", opts: p64, remote: "2001:abcd:ef01:2345:6789:abcd:ef01:234", want: "ip:2001:abcd:ef01:2345::/64"},
		{name: "Traefik /64", opts: p64, remote: "::abcd:1111:2222:3333", want: "ip:::/64"},
		{name: "Traefik /80", opts: &IPOptions{IPv6Prefix: 80}, remote: "::abcd:1111:2222:3333", want: "ip:::abcd:0:0:0/80"},
		{name: "Traefik /96", opts: &IPOptions{IPv6Prefix: 96}, remote: "::abcd:1111:2222:3333", want: "ip:::abcd:1111:0:0/96"},
		{name: "IPv4 never grouped", opts: p64, remote: "192.168.1.1:1", want: "ip:192.168.1.1"},
		{name: "mapped IPv4", remote: "[::ffff:192.0.2.1]:1", want: "ip:192.0.2.1"},
		{name: "mapped IPv4 with /64", opts: p64, remote: "[::ffff:192.0.2.1]:1", want: "ip:192.0.2.1"},
		{name: "bare mapped IPv4", opts: p64, remote: "::ffff:192.0.2.1", want: "ip:192.0.2.1"},
		{name: "zone dropped", opts: p128, remote: "[fe80::1%eth0]:9999", want: "ip:fe80::1"},
		{name: "zone dropped, bare", opts: p128, remote: "fe80::1%eth0", want: "ip:fe80::1"},
		{name: "zone with /64", opts: p64, remote: "[fe80::1%eth0]:9999", want: "ip:fe80::/64"},
		{name: "zone untrusted peer", opts: trust("10.0.0.0/8"), remote: "[fe80::1%eth0]:9999",
			header: "X-Forwarded-For", lines: []string{"1.2.3.4"}, want: "ip:fe80::1"},
		{name: "empty RemoteAddr", remote: "", wantErr: errNoClientIP},
		{name: "garbage RemoteAddr", remote: "garbage", wantErr: errNoClientIP},
		{name: "unix socket", remote: "@", wantErr: errNoClientIP},
		{name: "host name", remote: "localhost:80", wantErr: errNoClientIP},
		{name: "unbracketed IPv6 with port", remote: "2001:db8::1:80:x", wantErr: errNoClientIP},
		{name: "missing port", remote: "192.0.2.1:", wantErr: errNoClientIP},
		{name: "port only", remote: ":80", wantErr: errNoClientIP},
		{name: "unclosed bracket", remote: "[2001:db8::1:80", wantErr: errNoClientIP},
		{name: "junk after bracket", remote: "[2001:db8::1]x", wantErr: errNoClientIP},
		{name: "unspecified IPv4", remote: "0.0.0.0:1", wantErr: errNoClientIP},
		{name: "unspecified IPv6", remote: "[::]:1", wantErr: errNoClientIP},
		{name: "IPv4 zone", remote: "1.2.3.4%eth0:1", wantErr: errNoClientIP},
	})
}

func TestKeyByIPOptionErrors(t *testing.T) {
	tests := []struct {
		name string
		opts IPOptions
		want string // the error message
	}{
		{"bad CIDR", IPOptions{TrustedProxies: []string{"10.0.0.0/8", "10.0.0.0/33"}},
			`ratelimit: KeyByIP: TrustedProxies entry "10.0.0.0/33": want a CIDR prefix or an IP address`},
		{"bad IP", IPOptions{TrustedProxies: []string{"10.0.0.256"}},
			`ratelimit: KeyByIP: TrustedProxies entry "10.0.0.256": want a CIDR prefix or an IP address`},
		{"host name", IPOptions{TrustedProxies: []string{"proxy.internal"}},
			`ratelimit: KeyByIP: TrustedProxies entry "proxy.internal": want a CIDR prefix or an IP address`},
		{"IPv6 bits", IPOptions{TrustedProxies: []string{"2001:db8::/129"}},
			`ratelimit: KeyByIP: TrustedProxies entry "2001:db8::/129": want a CIDR prefix or an IP address`},
		{"zone in CIDR", IPOptions{TrustedProxies: []string{"fe80::%eth0/64"}},
			`ratelimit: KeyByIP: TrustedProxies entry "fe80::%eth0/64": want a CIDR prefix or an IP address`},
		{"bad header", IPOptions{Header: "X-Client-IP"},
			`ratelimit: KeyByIP: Header "X-Client-IP": want X-Forwarded-For, Forwarded or X-Real-IP`},
		{"bits 129", IPOptions{IPv6Prefix: 129}, "ratelimit: KeyByIP: IPv6Prefix 129: want 1 to 128, or 0 for the default, 64"},
		{"bits -1", IPOptions{IPv6Prefix: -1}, "ratelimit: KeyByIP: IPv6Prefix -1: want 1 to 128, or 0 for the default, 64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kf, err := KeyByIP(&tc.opts)
			if assert.Error(t, err, "KeyByIP(%+v) = nil error", tc.opts) {
				assert.Equal(t, tc.want, err.Error(), "KeyByIP(%+v) error", tc.opts)
			}
			assert.Nil(t, kf, "KeyByIP(%+v) KeyFunc with an error", tc.opts)
		})
	}
}

func TestKeyByIPOptionsAccepted(t *testing.T) {
	tests := []struct {
		name string
		opts *IPOptions
	}{
		{"nil", nil},
		{"zero", &IPOptions{}},
		{"empty entries", trust(append(strings.Split("", ","), " ", "")...)},
		{"spaces trimmed", trust(" 10.0.0.0/8 ", "\t::1")},
		{"unmasked CIDR", trust("10.0.0.5/8")},
		{"IPv6 zone in bare IP", trust("fe80::1%eth0")},
		{"header Forwarded", &IPOptions{Header: "FORWARDED"}},
		{"header X-Real-IP", &IPOptions{Header: " x-real-ip "}},
		{"header X-Forwarded-For", &IPOptions{Header: "X-Forwarded-For"}},
		{"bits 0", &IPOptions{IPv6Prefix: 0}},
		{"bits 1", &IPOptions{IPv6Prefix: 1}},
		{"bits 56", &IPOptions{IPv6Prefix: 56}},
		{"bits 128", &IPOptions{IPv6Prefix: 128}},
		{"quiet", &IPOptions{Quiet: true}},
	}
	for _, tc := range tests {
		kf, err := KeyByIP(tc.opts)
		assert.NoError(t, err, "KeyByIP(%s)", tc.name)
		assert.NotNil(t, kf, "KeyByIP(%s)", tc.name)
	}
}

func TestTrustedProxiesParsing(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"10.0.0.5/8", "10.0.0.0/8"},
		{"10.0.0.5", "10.0.0.5/32"},
		{"2001:DB8::1", "2001:db8::1/128"},
		{"fe80::1%eth0", "fe80::1/128"},
		{"::ffff:10.0.0.1", "10.0.0.1/32"},
		{"::ffff:4.4.4.4/124", "4.4.4.0/28"},
		{"::ffff:0:0/96", "0.0.0.0/0"},
		{"::ffff:0:0/95", "::fffe:0:0/95"},
		{"::/0", "::/0"},
	}
	for _, tc := range tests {
		c, err := newIPConfig("KeyByIP", trust(tc.in))
		require.NoError(t, err, "TrustedProxies %q", tc.in)
		require.Len(t, c.trusted, 1, "TrustedProxies %q", tc.in)
		assert.Equal(t, tc.want, c.trusted[0].String(), "TrustedProxies %q = %v, want %v", tc.in, c.trusted[0], tc.want)
	}
}

// fuzzKeyFuncs are KeyByIP configurations that read every header.
func fuzzKeyFuncs(t testing.TB) []KeyFunc {
	all := []string{"0.0.0.0/0", "::/0"}
	some := []string{"10.0.0.0/8", "2001:db8::/32", "::ffff:192.0.2.0/120"}
	var kfs []KeyFunc
	for _, o := range []*IPOptions{
		nil,
		{IPv6Prefix: 64},
		{TrustedProxies: all, Quiet: true},
		{TrustedProxies: all, IPv6Prefix: 56, Quiet: true},
		{TrustedProxies: some},
		{TrustedProxies: all, Header: "Forwarded", Quiet: true},
		{TrustedProxies: some, Header: "Forwarded", IPv6Prefix: 64},
		{TrustedProxies: all, Header: "X-Real-IP", Quiet: true},
		{TrustedProxies: some, Header: "X-Real-IP", IPv6Prefix: 48},
	} {
		kf, err := KeyByIP(o)
		require.NoError(t, err)
		kfs = append(kfs, kf)
	}
	return kfs
}

func FuzzClientIP(f *testing.F) {
	seeds := [][3]string{
		{"10.0.0.5:555", "3.3.3.3, 10.0.0.1", ""},
		{"9.9.9.9:1234", "1.2.3.4, 10.0.0.1", ""},
		{"[fe80::1%eth0]:9999", "fe80::382b:141b:fa4a:2a16%28", ""},
		{"[2001:db8::5]:1", "[2001:db8::1]:443,unknown", `for="[2001:db8:cafe::17]:4711"`},
		{"10.0.0.1:1", "", `For=99.99.99.99, For=4.4.4.8, For="[2607:f8b0:4004:83f::200e]:4747"`},
		{"10.0.0.1:1", "::ffff:192.0.2.1", `for=_hidden, for=_SEVKISEK`},
		{"10.0.0.1:1", "01.2.3.4, 0.0.0.0", `for="a\"b;c,d", for=unknown`},
		{"::ffff:10.0.0.1", "1.2.3.4:80\n5.6.7.8", "proto=https;for=192.0.2.60\nfor=\"192.0.2.1:_x\""},
		{"garbage", "x", "for="},
		{"10.0.0.1:1", "[1.2.3.4]:80, 1.2.3.4%eth0", `for="unterminated`},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2])
	}
	kfs := fuzzKeyFuncs(f)
	f.Fuzz(func(t *testing.T, remote, xff, fwd string) {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
		for _, l := range strings.Split(xff, "\n") {
			r.Header.Add("X-Forwarded-For", l)
			r.Header.Add("X-Real-Ip", l)
		}
		for _, l := range strings.Split(fwd, "\n") {
			r.Header.Add("Forwarded", l)
		}
		for i, kf := range kfs {
			key, err := kf(r)
			if err != nil {
				if !errors.Is(err, errNoClientIP) {
					t.Fatalf("config %d: key(%q, %q, %q) error %v does not wrap errNoClientIP", i, remote, xff, fwd, err)
				}
				if key != "" {
					t.Fatalf("config %d: key(%q, %q, %q) = %q with error %v", i, remote, xff, fwd, key, err)
				}
				continue
			}
			checkIPKey(t, key)
		}
	})
}

// checkIPKey fails unless key is "ip:" followed by the canonical text of a
// valid, specified, unmapped address without zone, or of an IPv6 prefix.
func checkIPKey(t *testing.T, key string) {
	t.Helper()
	s, ok := strings.CutPrefix(key, "ip:")
	if !ok {
		t.Fatalf("key %q lacks prefix ip:", key)
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is6() || p.Addr().Is4In6() || p != p.Masked() || p.String() != s {
			t.Fatalf("key %q: not a canonical IPv6 prefix (%v)", key, err)
		}
		return
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Is4In6() || a.Zone() != "" || a.IsUnspecified() || a.String() != s {
		t.Fatalf("key %q: not a canonical address (%v)", key, err)
	}
}

func BenchmarkKeyByIP(b *testing.B) {
	trusted := []string{"10.0.0.0/8", "172.16.0.0/12", "2001:db8::/32"}
	benches := []struct {
		name   string
		opts   *IPOptions
		remote string
		header string
		value  string
	}{
		{"RemoteAddr", nil, "203.0.113.7:51234", "", ""},
		{"RemoteAddrIPv6Prefix", &IPOptions{IPv6Prefix: 64}, "[2001:db9:1:2:3:4:5:6]:51234", "", ""},
		{"XFF", &IPOptions{TrustedProxies: trusted}, "10.0.0.5:51234", "X-Forwarded-For", "198.51.100.7, 172.16.0.9, 10.0.0.1"},
		{"Forwarded", &IPOptions{TrustedProxies: trusted, Header: "Forwarded"}, "10.0.0.5:51234", "Forwarded",
			`for=198.51.100.7;proto=https, for="[2001:db8::9]:443", for=10.0.0.1`},
		{"XRealIP", &IPOptions{TrustedProxies: trusted, Header: "X-Real-IP"}, "10.0.0.5:51234", "X-Real-Ip", "198.51.100.7"},
	}
	for _, bc := range benches {
		b.Run(bc.name, func(b *testing.B) {
			kf, err := KeyByIP(bc.opts)
			require.NoError(b, err)
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = bc.remote
			if bc.header != "" {
				r.Header.Set(bc.header, bc.value)
			}
			benchKeys(b, kf, r)
		})
	}
}

// KeyByIP remembers the peers it has seen: whatever the cache holds, every
// key is the one the address gives, also when more peers than its slots
// evict each other, and a repeated peer allocates nothing.
func TestKeyByIPPeerCache(t *testing.T) {
	key, err := KeyByIP(&IPOptions{IPv6Prefix: 64})
	require.NoError(t, err)
	r := httptest.NewRequest("GET", "/", nil)
	for round := range 3 {
		for i := range 5000 {
			j := i * 7919 % 5000
			want := fmt.Sprintf("ip:10.%d.%d.1", j/256, j%256)
			r.RemoteAddr = want[3:] + ":" + strconv.Itoa(1000+j%7)
			if j%2 == 1 {
				r.RemoteAddr = fmt.Sprintf("[2001:db8:%x::%x]:443", j, j)
				want = fmt.Sprintf("ip:2001:db8:%x::/64", j)
			}
			got, err := key(r)
			require.NoError(t, err)
			if got != want {
				t.Fatalf("round %d: key of %s = %q, want %q", round, r.RemoteAddr, got, want)
			}
		}
	}
	r.RemoteAddr = "192.0.2.9:1234"
	_, _ = key(r)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = key(r) }), "a cached peer allocates")
}

// KeyByIP's refusals carry a detail for the client that names the field at
// fault, never its value, and wrap ErrBadRequest.
func TestKeyByIPRefusalDetails(t *testing.T) {
	const secret = "sk_live_0123456789abcdef"
	many := strings.TrimSuffix(strings.Repeat("10.0.0.9, ", maxHops+1), ", ")
	manyFwd := strings.TrimSuffix(strings.Repeat("for=10.0.0.9, ", maxHops+1), ", ")
	for _, tc := range []struct {
		name   string
		header string // IPOptions.Header
		remote string
		lines  []string
		detail string
	}{
		{"bad remote address", "", secret, nil, "the request's remote address is not an IP address"},
		{"bad X-Forwarded-For entry", "", "10.0.0.1:1", []string{"203.0.113.7, " + secret}, "the trusted proxy sent an X-Forwarded-For entry that is not an IP address"},
		{"empty X-Forwarded-For entry", "", "10.0.0.1:1", []string{secret + ", "}, "the trusted proxy sent an empty X-Forwarded-For entry"},
		{"too many X-Forwarded-For entries", "", "10.0.0.1:1", []string{many}, "the X-Forwarded-For header holds more than 32 entries from trusted proxies"},
		{"bad Forwarded for=", "Forwarded", "10.0.0.1:1", []string{"for=" + secret}, "the trusted proxy sent a Forwarded for= parameter that is not an IP address"},
		{"malformed Forwarded", "Forwarded", "10.0.0.1:1", []string{`for="` + secret}, "the trusted proxy sent a malformed Forwarded element"},
		{"Forwarded element without for=", "Forwarded", "10.0.0.1:1", []string{"for=" + secret, "proto=https"}, "the trusted proxy sent a Forwarded element without for="},
		{"too many Forwarded elements", "Forwarded", "10.0.0.1:1", []string{manyFwd}, "the Forwarded header holds more than 32 elements from trusted proxies"},
		{"bad X-Real-IP", "X-Real-IP", "10.0.0.1:1", []string{secret}, "the trusted proxy sent an X-Real-IP header that is not an IP address"},
		{"empty X-Real-IP", "X-Real-IP", "10.0.0.1:1", []string{" "}, "the trusted proxy sent an empty X-Real-IP header"},
		{"two X-Real-IP lines", "X-Real-IP", "10.0.0.1:1", []string{"203.0.113.7", secret}, "the request carries 2 X-Real-IP lines, not one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kf, err := KeyByIP(&IPOptions{TrustedProxies: []string{"10.0.0.0/8"}, Header: tc.header})
			require.NoError(t, err)
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.remote
			name := tc.header
			if name == "" {
				name = "X-Forwarded-For"
			}
			for _, l := range tc.lines {
				r.Header.Add(name, l)
			}
			_, err = kf(r)
			require.ErrorIs(t, err, ErrBadRequest)
			var ce *clientkey.Error
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tc.detail, ce.Detail)
			assert.Equal(t, clientkey.KindClientIP, ce.Kind)
			assert.NotContains(t, ce.Detail, secret)
		})
	}
}

// An IPv6 subscriber has a /64 at least, and privacy extensions give it a
// new address in it whenever it likes: by default its addresses share one
// key, as a /64; IPv6Prefix 128 asks for one key per address.
func TestKeyByIPv6Default(t *testing.T) {
	keys := func(opts *IPOptions) map[string]bool {
		kf, err := KeyByIP(opts)
		require.NoError(t, err)
		seen := map[string]bool{}
		for i := range 1000 {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, 8: byte(i >> 8), 15: byte(i)}), 443).String()
			k, err := kf(r)
			require.NoError(t, err, "RemoteAddr %q", r.RemoteAddr)
			seen[k] = true
		}
		return seen
	}
	for _, opts := range []*IPOptions{nil, {}, {IPv6Prefix: 64}} {
		seen := keys(opts)
		assert.Equal(t, 1, len(seen), "distinct keys of 1000 addresses of one /64 with %+v", opts)
		assert.True(t, seen["ip:2001:db8:1:2::/64"], "the key of 2001:db8:1:2::/64 with %+v", opts)
	}
	assert.Equal(t, 1000, len(keys(&IPOptions{IPv6Prefix: 128})), "distinct keys of 1000 addresses with IPv6Prefix 128")
}
