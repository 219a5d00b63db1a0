package ratelimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ipCase is one request given to a KeyFunc built by KeyByIP.
type ipCase struct {
	name    string
	opts    []IPOption
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
			kf, err := KeyByIP(tc.opts...)
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

func opts(o ...IPOption) []IPOption { return o }

// V13, realclientip-go RightmostTrustedRange and the peer checks.
func TestKeyByIPForwardedFor(t *testing.T) {
	const xff = "X-Forwarded-For"
	trusted10 := opts(TrustedProxies("10.0.0.0/8"))
	runIPCases(t, []ipCase{
		{name: "no proxies: peer", remote: "203.0.113.7:1234", want: "ip:203.0.113.7"},
		{name: "no proxies ignore XFF", remote: "203.0.113.7:1234", header: xff,
			lines: []string{"1.2.3.4"}, want: "ip:203.0.113.7"},
		{name: "untrusted peer ignores XFF", opts: trusted10, remote: "9.9.9.9:1234", header: xff,
			lines: []string{"1.2.3.4, 10.0.0.1"}, want: "ip:9.9.9.9"},
		{name: "untrusted peer ignores garbage XFF", opts: trusted10, remote: "9.9.9.9:1234", header: xff,
			lines: []string{"garbage"}, want: "ip:9.9.9.9"},
		{name: "trusted peer", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{"3.3.3.3, 10.0.0.1"}, want: "ip:3.3.3.3"},
		{name: "spoofed leftmost ignored", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{"6.6.6.6, 3.3.3.3, 10.0.0.1"}, want: "ip:3.3.3.3"},
		{name: "spoofed trusted leftmost ignored", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{"10.1.1.1, 3.3.3.3"}, want: "ip:3.3.3.3"},
		{name: "trusted peer without XFF", opts: trusted10, remote: "10.0.0.5:555", want: "ip:10.0.0.5"},
		{name: "trusted peer with empty XFF", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{"", " , ,"}, want: "ip:10.0.0.5"},
		{name: "all trusted: leftmost", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{"10.0.0.3, 10.0.0.2", "10.0.0.1"}, want: "ip:10.0.0.3"},
		{name: "lines merged: no ranges", remote: "4.4.4.4:80", header: xff,
			lines: []string{"2.2.2.2:3384, 3.3.3.3", "4.4.4.4"}, want: "ip:4.4.4.4"},
		{name: "lines merged: trusted /24", opts: opts(TrustedProxies("4.4.4.0/24")), remote: "4.4.4.4:80", header: xff,
			lines: []string{"2.2.2.2:3384, 3.3.3.3", "4.4.4.4"}, want: "ip:3.3.3.3"},
		{name: "lines merged: trusted single IP", opts: opts(TrustedProxies("4.4.4.4")), remote: "4.4.4.4:80", header: xff,
			lines: []string{"2.2.2.2:3384, 3.3.3.3", "4.4.4.4"}, want: "ip:3.3.3.3"},
		{name: "lines merged: into earlier line", opts: opts(TrustedProxies("4.4.4.4", "3.3.3.3")), remote: "4.4.4.4:80", header: xff,
			lines: []string{"2.2.2.2:3384, 3.3.3.3", "4.4.4.4"}, want: "ip:2.2.2.2"},
		{name: "Cloudflare ranges", remote: "[2400:cb00::1]:443", header: xff,
			opts:  opts(TrustedProxies(cloudflare...)),
			lines: []string{"2.2.2.2:3384, 3.3.3.3", "4.4.4.4", "2400:cb00::1"}, want: "ip:4.4.4.4"},
		{name: "V13 header: walk into earlier lines", remote: "10.10.10.10:1", header: xff,
			opts: opts(TrustedProxies("10.0.0.0/8", "11.11.11.11", "12.12.12.12", "9.9.9.9", "8.8.8.8")),
			lines: []string{"4.4.4.4, 5.5.5.5", "::1, fe80::382b:141b:fa4a:2a16%28",
				"7.7.7.7.7, 8.8.8.8, 9.9.9.9, 10.10.10.10,11.11.11.11, 12.12.12.12"},
			wantErr: ErrNoClientIP},
		{name: "V13 header: fifth from the right", remote: "10.10.10.10:1", header: xff,
			opts: opts(TrustedProxies("10.0.0.0/8", "11.11.11.11", "12.12.12.12", "9.9.9.9")),
			lines: []string{"4.4.4.4, 5.5.5.5", "::1, fe80::382b:141b:fa4a:2a16%28",
				"7.7.7.7.7, 8.8.8.8, 9.9.9.9, 10.10.10.10,11.11.11.11, 12.12.12.12"},
			want: "ip:8.8.8.8"},
		{name: "zone in XFF dropped", remote: "10.0.0.1:1", opts: trusted10, header: xff,
			lines: []string{"fe80::382b:141b:fa4a:2a16%28"}, want: "ip:fe80::382b:141b:fa4a:2a16"},
		{name: "IPv6 with port", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{"[2001:db8::1]:443"}, want: "ip:2001:db8::1"},
		{name: "IPv6 in brackets", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{"[2001:DB8::1]"}, want: "ip:2001:db8::1"},
		{name: "IPv4 with port", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{"1.2.3.4:80"}, want: "ip:1.2.3.4"},
		{name: "mapped IPv4 in XFF", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{"::ffff:192.0.2.1"}, want: "ip:192.0.2.1"},
		{name: "mapped trusted entry skipped", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{"192.0.2.1, ::ffff:10.1.2.3"}, want: "ip:192.0.2.1"},
		{name: "unknown reached", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{"unknown"}, wantErr: ErrNoClientIP},
		{name: "garbage reached", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{"1.2.3.4, garbage, 10.0.0.1"}, wantErr: ErrNoClientIP},
		{name: "garbage left of client ignored", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{"garbage, 1.2.3.4, 10.0.0.1"}, want: "ip:1.2.3.4"},
		{name: "leading zero octet", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{"01.2.3.4"}, wantErr: ErrNoClientIP},
		{name: "unspecified address", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{"0.0.0.0"}, wantErr: ErrNoClientIP},
		{name: "bad port", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{"1.2.3.4:99999"}, wantErr: ErrNoClientIP},
		{name: "IPv4 in brackets", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{"[1.2.3.4]:80"}, wantErr: ErrNoClientIP},
		{name: "huge entry", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{strings.Repeat("1", 100_000)}, wantErr: ErrNoClientIP},
		{name: "too many trusted hops", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{strings.Repeat("10.0.0.1,", maxHops+1)}, wantErr: ErrNoClientIP},
		{name: "maxHops trusted hops", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{strings.Repeat("10.0.0.1,", maxHops)}, want: "ip:10.0.0.1"},
		{name: "client behind many hops", opts: trusted10, remote: "10.0.0.5:555", header: xff,
			lines: []string{strings.Repeat("6.6.6.6,", 10_000) + "3.3.3.3, 10.0.0.1"}, want: "ip:3.3.3.3"},
		{name: "explicit XFF option", opts: opts(TrustedProxies("10.0.0.0/8"), ProxyHeader("x-forwarded-for")),
			remote: "10.0.0.5:555", header: xff, lines: []string{"3.3.3.3"}, want: "ip:3.3.3.3"},
		{name: "other header ignored", opts: opts(TrustedProxies("10.0.0.0/8")),
			remote: "10.0.0.5:555", header: "Forwarded", lines: []string{"for=3.3.3.3"}, want: "ip:10.0.0.5"},
		{name: "IPv6 trusted proxy", opts: opts(TrustedProxies("2001:db8::/32")),
			remote: "[2001:db8::5]:555", header: xff, lines: []string{"2001:db9::1, 2001:db8:1::1"}, want: "ip:2001:db9::1"},
		{name: "IPv6 prefix never matches IPv4", opts: opts(TrustedProxies("::/0")),
			remote: "10.0.0.5:555", header: xff, lines: []string{"3.3.3.3"}, want: "ip:10.0.0.5"},
		{name: "mapped trusted prefix", opts: opts(TrustedProxies("::ffff:10.0.0.0/104")),
			remote: "10.0.0.5:555", header: xff, lines: []string{"3.3.3.3"}, want: "ip:3.3.3.3"},
		{name: "mapped peer matches IPv4 range", opts: trusted10,
			remote: "[::ffff:10.0.0.5]:555", header: xff, lines: []string{"3.3.3.3"}, want: "ip:3.3.3.3"},
	})
}

// Traefik's excludedIPs vectors: excluded addresses are trusted proxies here.
func TestKeyByIPExcludedIPs(t *testing.T) {
	const xff = "X-Forwarded-For"
	const peer = "192.168.0.1:80"
	runIPCases(t, []ipCase{
		{name: "one excluded", opts: opts(TrustedProxies("192.168.0.0/16", "11.0.0.1")), remote: peer, header: xff,
			lines: []string{"10.0.0.1,11.0.0.1,13.0.0.1"}, want: "ip:13.0.0.1"},
		{name: "excluded not present", opts: opts(TrustedProxies("192.168.0.0/16", "15.0.0.1", "16.0.0.1")), remote: peer, header: xff,
			lines: []string{"10.0.0.1,11.0.0.1,13.0.0.1"}, want: "ip:13.0.0.1"},
		{name: "rightmost excluded", opts: opts(TrustedProxies("192.168.0.0/16", "12.0.0.1")), remote: peer, header: xff,
			lines: []string{"10.0.0.1,11.0.0.1,12.0.0.1"}, want: "ip:11.0.0.1"},
		// Traefik gives no address here; KeyByIP takes the leftmost.
		{name: "all excluded", opts: opts(TrustedProxies("192.168.0.0/16", "10.0.0.1", "11.0.0.1")), remote: peer, header: xff,
			lines: []string{"10.0.0.1,11.0.0.1"}, want: "ip:10.0.0.1"},
	})
}

// cloudflare is Cloudflare's published list of ranges, as used by the V13 vector.
var cloudflare = []string{
	"173.245.48.0/20", "103.21.244.0/22", "103.22.200.0/22", "103.31.4.0/22",
	"141.101.64.0/18", "108.162.192.0/18", "190.93.240.0/20", "188.114.96.0/20",
	"197.234.240.0/22", "198.41.128.0/17", "162.158.0.0/15", "104.16.0.0/13",
	"104.24.0.0/14", "172.64.0.0/13", "131.0.72.0/22",
	"2400:cb00::/32", "2606:4700::/32", "2803:f800::/32", "2405:b500::/32",
	"2405:8100::/32", "2a06:98c0::/29", "2c0f:f248::/32",
}

func TestKeyByIPForwarded(t *testing.T) {
	const fwd = "Forwarded"
	forwarded := func(cidrs ...string) []IPOption {
		return opts(ProxyHeader("Forwarded"), TrustedProxies(cidrs...))
	}
	runIPCases(t, []ipCase{
		{name: "V13 big vector", remote: "2.2.2.2:1", header: fwd,
			opts: forwarded("2.2.2.2/32", "2607:f8b0:4004:83f::200e/128", "3.3.0.0/16", "2001:db7::/64",
				"::ffff:4.4.4.4/124", "64:ff9b::188.0.2.128/112"),
			lines: []string{
				`For=99.99.99.99, For=4.4.4.8, For="[2607:f8b0:4004:83f::200e]:4747"`,
				`For=2.2.2.2:8883, For=64:ff9b::188.0.2.200, For=3.3.5.5, For=2001:db7::abcd`,
			},
			want: "ip:99.99.99.99"},
		{name: "V13 count header: rightmost", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{`For="::ffff:bc15:0006"`, "host=what;for=6.6.6.6;proto=https"}, want: "ip:6.6.6.6"},
		{name: "V13 count header: mapped unmapped", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8", "6.6.6.6"),
			lines: []string{`For="::ffff:bc15:0006"`, "host=what;for=6.6.6.6;proto=https"}, want: "ip:188.21.0.6"},
		{name: "untrusted peer ignores Forwarded", remote: "9.9.9.9:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{"for=1.2.3.4, for=10.0.0.1"}, want: "ip:9.9.9.9"},
		{name: "obfuscated gazonk", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{`for="_gazonk"`}, wantErr: ErrNoClientIP},
		{name: "quoted IPv6 with port", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{`For="[2001:db8:cafe::17]:4711"`}, want: "ip:2001:db8:cafe::17"},
		{name: "other parameters", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{"for=192.0.2.60;proto=http;by=203.0.113.43"}, want: "ip:192.0.2.60"},
		{name: "two elements", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{"for=192.0.2.43, for=198.51.100.17"}, want: "ip:198.51.100.17"},
		{name: "two elements, right trusted", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8", "198.51.100.17"),
			lines: []string{"for=192.0.2.43, for=198.51.100.17"}, want: "ip:192.0.2.43"},
		{name: "unknown reached", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{`for=192.0.2.43,for="[2001:db8:cafe::17]",for=unknown`}, wantErr: ErrNoClientIP},
		{name: "three elements, unknown trusted away", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{`for=unknown,for=192.0.2.43,for="[2001:db8:cafe::17]"`}, want: "ip:2001:db8:cafe::17"},
		{name: "bracketed IPv6 without port", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8", "2001:db8:cafe::17"),
			lines: []string{`for=192.0.2.43,for="[2001:db8:cafe::17]"`}, want: "ip:192.0.2.43"},
		{name: "hidden reached", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{"for=_hidden, for=_SEVKISEK"}, wantErr: ErrNoClientIP},
		{name: "nope reached", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{"For=nope"}, wantErr: ErrNoClientIP},
		{name: "unspecified reached", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{"For=0.0.0.0"}, wantErr: ErrNoClientIP},
		{name: "obfuscated port", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{`for="192.0.2.43:_p0rt"`}, want: "ip:192.0.2.43"},
		{name: "uppercase FOR and spaces", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{"proto=https ; FOR=192.0.2.43 ;by=10.0.0.1 ,"}, want: "ip:192.0.2.43"},
		{name: "element without for skipped", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{"for=192.0.2.43, proto=https;by=10.0.0.1"}, want: "ip:192.0.2.43"},
		{name: "no for at all", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{"proto=https;by=10.0.0.1"}, want: "ip:10.0.0.1"},
		{name: "absent", remote: "10.0.0.1:1", opts: forwarded("10.0.0.0/8"), want: "ip:10.0.0.1"},
		{name: "comma in quoted string", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{`for=192.0.2.43;host="a,for=6.6.6.6"`}, want: "ip:192.0.2.43"},
		{name: "escaped quote in quoted string", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{`for=192.0.2.43;host="a\",for=6.6.6.6"`}, want: "ip:192.0.2.43"},
		{name: "quoted-pair in for", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{`for="\[2001:db8::1\]:80"`}, want: "ip:2001:db8::1"},
		{name: "all trusted: leftmost", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{"for=10.0.0.3", "for=10.0.0.2"}, want: "ip:10.0.0.3"},
		{name: "malformed element reached", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{"for=192.0.2.43, for"}, wantErr: ErrNoClientIP},
		{name: "malformed element left of client", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{"for, for=192.0.2.43"}, want: "ip:192.0.2.43"},
		{name: "unterminated quote swallows the rest", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{`for="192.0.2.43, for=10.0.0.2`}, wantErr: ErrNoClientIP},
		{name: "duplicate for", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{"for=192.0.2.43;for=192.0.2.44"}, wantErr: ErrNoClientIP},
		{name: "garbage after value", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{"for=192.0.2.43 x"}, wantErr: ErrNoClientIP},
		{name: "empty value", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{"for="}, wantErr: ErrNoClientIP},
		{name: "too many trusted hops", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{strings.Repeat("for=10.0.0.1,", maxHops+1)}, wantErr: ErrNoClientIP},
		{name: "maxHops trusted hops", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{strings.Repeat("for=10.0.0.2,", maxHops)}, want: "ip:10.0.0.2"},
		{name: "client behind many elements", remote: "10.0.0.1:1", header: fwd, opts: forwarded("10.0.0.0/8"),
			lines: []string{strings.Repeat("for=6.6.6.6,", 1000) + "for=3.3.3.3, for=10.0.0.2"}, want: "ip:3.3.3.3"},
	})
}

func TestKeyByIPRealIP(t *testing.T) {
	const real = "X-Real-IP"
	realIP := opts(ProxyHeader("x-real-ip"), TrustedProxies("10.0.0.0/8"))
	runIPCases(t, []ipCase{
		{name: "trusted peer", opts: realIP, remote: "10.0.0.1:1", header: real,
			lines: []string{"203.0.113.7"}, want: "ip:203.0.113.7"},
		{name: "untrusted peer ignored", opts: realIP, remote: "9.9.9.9:1", header: real,
			lines: []string{"203.0.113.7"}, want: "ip:9.9.9.9"},
		{name: "no proxies ignored", opts: opts(ProxyHeader("X-Real-IP")), remote: "10.0.0.1:1", header: real,
			lines: []string{"203.0.113.7"}, want: "ip:10.0.0.1"},
		{name: "absent", opts: realIP, remote: "10.0.0.1:1", want: "ip:10.0.0.1"},
		{name: "empty", opts: realIP, remote: "10.0.0.1:1", header: real, lines: []string{" "}, want: "ip:10.0.0.1"},
		{name: "trusted value kept", opts: realIP, remote: "10.0.0.1:1", header: real,
			lines: []string{"10.9.9.9"}, want: "ip:10.9.9.9"},
		{name: "IPv6 with port", opts: realIP, remote: "10.0.0.1:1", header: real,
			lines: []string{"[2001:db8::7]:8080"}, want: "ip:2001:db8::7"},
		{name: "garbage", opts: realIP, remote: "10.0.0.1:1", header: real,
			lines: []string{"unknown"}, wantErr: ErrNoClientIP},
		{name: "list", opts: realIP, remote: "10.0.0.1:1", header: real,
			lines: []string{"1.2.3.4, 5.6.7.8"}, wantErr: ErrNoClientIP},
		{name: "two lines", opts: realIP, remote: "10.0.0.1:1", header: real,
			lines: []string{"1.2.3.4", "5.6.7.8"}, wantErr: ErrNoClientIP},
		{name: "XFF ignored", opts: realIP, remote: "10.0.0.1:1", header: "X-Forwarded-For",
			lines: []string{"1.2.3.4"}, want: "ip:10.0.0.1"},
	})
}

// V14 and RemoteAddr parsing.
func TestKeyByIPNormalization(t *testing.T) {
	p64 := opts(IPv6Prefix(64))
	runIPCases(t, []ipCase{
		{name: "IPv4 with port", remote: "192.0.2.1:1234", want: "ip:192.0.2.1"},
		{name: "bare IPv4", remote: "192.0.2.1", want: "ip:192.0.2.1"},
		{name: "IPv6 with port", remote: "[2001:DB8::1]:1234", want: "ip:2001:db8::1"},
		{name: "bare IPv6", remote: "2001:db8::1", want: "ip:2001:db8::1"},
		{name: "IPv6 full form", remote: "[2001:0db8:0000:0000:0000:0000:0000:0001]:1", want: "ip:2001:db8::1"},
		{name: "IPv6 /64", opts: p64, remote: "[2001:DB8::1]:1234", want: "ip:2001:db8::/64"},
		{name: "IPv6 /64 same subscriber", opts: p64, remote: "[2001:db8::ffff:1]:1", want: "ip:2001:db8::/64"},
		{name: "IPv6 /64 with subnet", opts: p64, remote: "[2001:db8:1:2:3:4:5:6]:1", want: "ip:2001:db8:1:2::/64"},
		{name: "IPv6 /128 is no grouping", opts: opts(IPv6Prefix(128)), remote: "[2001:db8::1]:1", want: "ip:2001:db8::1"},
		{name: "IPv6 /48", opts: opts(IPv6Prefix(48)), remote: "[2001:db8:1:2::1]:1", want: "ip:2001:db8:1::/48"},
		{name: "IPv6 /1", opts: opts(IPv6Prefix(1)), remote: "[2001:db8::1]:1", want: "ip:::/1"},
		{name: "Envoy /64", opts: p64, remote: "2001:abcd:ef01:2345:6789:abcd:ef01:234", want: "ip:2001:abcd:ef01:2345::/64"},
		{name: "Traefik /64", opts: p64, remote: "::abcd:1111:2222:3333", want: "ip:::/64"},
		{name: "Traefik /80", opts: opts(IPv6Prefix(80)), remote: "::abcd:1111:2222:3333", want: "ip:::abcd:0:0:0/80"},
		{name: "Traefik /96", opts: opts(IPv6Prefix(96)), remote: "::abcd:1111:2222:3333", want: "ip:::abcd:1111:0:0/96"},
		{name: "IPv4 never grouped", opts: p64, remote: "192.168.1.1:1", want: "ip:192.168.1.1"},
		{name: "mapped IPv4", remote: "[::ffff:192.0.2.1]:1", want: "ip:192.0.2.1"},
		{name: "mapped IPv4 with /64", opts: p64, remote: "[::ffff:192.0.2.1]:1", want: "ip:192.0.2.1"},
		{name: "bare mapped IPv4", opts: p64, remote: "::ffff:192.0.2.1", want: "ip:192.0.2.1"},
		{name: "zone dropped", remote: "[fe80::1%eth0]:9999", want: "ip:fe80::1"},
		{name: "zone dropped, bare", remote: "fe80::1%eth0", want: "ip:fe80::1"},
		{name: "zone with /64", opts: p64, remote: "[fe80::1%eth0]:9999", want: "ip:fe80::/64"},
		{name: "zone untrusted peer", opts: opts(TrustedProxies("10.0.0.0/8")), remote: "[fe80::1%eth0]:9999",
			header: "X-Forwarded-For", lines: []string{"1.2.3.4"}, want: "ip:fe80::1"},
		{name: "empty RemoteAddr", remote: "", wantErr: ErrNoClientIP},
		{name: "garbage RemoteAddr", remote: "garbage", wantErr: ErrNoClientIP},
		{name: "unix socket", remote: "@", wantErr: ErrNoClientIP},
		{name: "host name", remote: "localhost:80", wantErr: ErrNoClientIP},
		{name: "unbracketed IPv6 with port", remote: "2001:db8::1:80:x", wantErr: ErrNoClientIP},
		{name: "missing port", remote: "192.0.2.1:", wantErr: ErrNoClientIP},
		{name: "port only", remote: ":80", wantErr: ErrNoClientIP},
		{name: "unclosed bracket", remote: "[2001:db8::1:80", wantErr: ErrNoClientIP},
		{name: "junk after bracket", remote: "[2001:db8::1]x", wantErr: ErrNoClientIP},
		{name: "unspecified IPv4", remote: "0.0.0.0:1", wantErr: ErrNoClientIP},
		{name: "unspecified IPv6", remote: "[::]:1", wantErr: ErrNoClientIP},
		{name: "IPv4 zone", remote: "1.2.3.4%eth0:1", wantErr: ErrNoClientIP},
	})
}

func TestKeyByIPOptionErrors(t *testing.T) {
	tests := []struct {
		name string
		opt  IPOption
		want string // part of the error message
	}{
		{"bad CIDR", TrustedProxies("10.0.0.0/8", "10.0.0.0/33"), `"10.0.0.0/33"`},
		{"bad IP", TrustedProxies("10.0.0.256"), `"10.0.0.256"`},
		{"host name", TrustedProxies("proxy.internal"), `"proxy.internal"`},
		{"IPv6 bits", TrustedProxies("2001:db8::/129"), `"2001:db8::/129"`},
		{"zone in CIDR", TrustedProxies("fe80::%eth0/64"), `"fe80::%eth0/64"`},
		{"bad header", ProxyHeader("X-Client-IP"), `"X-Client-IP"`},
		{"empty header", ProxyHeader(""), "ProxyHeader"},
		{"bits 0", IPv6Prefix(0), "0 bits"},
		{"bits 129", IPv6Prefix(129), "129 bits"},
		{"bits -1", IPv6Prefix(-1), "-1 bits"},
		{"nil option", nil, "nil option"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kf, err := KeyByIP(tc.opt)
			if assert.Error(t, err, "KeyByIP(%s) = nil error", tc.name) {
				assert.Contains(t, err.Error(), tc.want, "KeyByIP(%s) error", tc.name)
			}
			assert.Nil(t, kf, "KeyByIP(%s) KeyFunc with an error", tc.name)
		})
	}
}

func TestKeyByIPOptionsAccepted(t *testing.T) {
	tests := []struct {
		name string
		opts []IPOption
	}{
		{"none", nil},
		{"empty entries", opts(TrustedProxies(strings.Split("", ",")...), TrustedProxies(" ", ""))},
		{"spaces trimmed", opts(TrustedProxies(" 10.0.0.0/8 ", "\t::1"))},
		{"unmasked CIDR", opts(TrustedProxies("10.0.0.5/8"))},
		{"IPv6 zone in bare IP", opts(TrustedProxies("fe80::1%eth0"))},
		{"headers", opts(ProxyHeader("FORWARDED"), ProxyHeader(" x-real-ip "), ProxyHeader("X-Forwarded-For"))},
		{"bits", opts(IPv6Prefix(1), IPv6Prefix(56), IPv6Prefix(128))},
	}
	for _, tc := range tests {
		kf, err := KeyByIP(tc.opts...)
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
		var c ipConfig
		require.NoError(t, TrustedProxies(tc.in)(&c), "TrustedProxies(%q)", tc.in)
		require.Len(t, c.trusted, 1, "TrustedProxies(%q)", tc.in)
		assert.Equal(t, tc.want, c.trusted[0].String(), "TrustedProxies(%q) = %v, want %v", tc.in, c.trusted[0], tc.want)
	}
}

func TestKeyByAPIKey(t *testing.T) {
	kf := KeyByAPIKey("x-api-key")
	key := func(values ...string) (string, error) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		for _, v := range values {
			r.Header.Add("X-API-Key", v)
		}
		return kf(r)
	}
	const secret = "sk_live_0123456789abcdef"
	k1, err := key(secret)
	require.NoError(t, err, "KeyByAPIKey(%q)", secret)

	t.Run("hashed", func(t *testing.T) {
		assert.True(t, strings.HasPrefix(k1, "ak:"), "key %q lacks prefix ak:", k1)
		assert.Len(t, k1, 25, "key %q", k1)
		assert.NotContains(t, k1, secret, "key holds the secret")
		assert.NotContains(t, k1, secret[:8], "key holds part of the secret")
	})
	t.Run("stable", func(t *testing.T) {
		k2, err := key(secret)
		require.NoError(t, err)
		assert.Equal(t, k1, k2, "same secret, different keys")
		k3, err := key("  " + secret + " ")
		require.NoError(t, err)
		assert.Equal(t, k1, k3, "spaces around the secret change the key")
		k4, err := key(secret, "other")
		require.NoError(t, err)
		assert.Equal(t, k1, k4, "second header line changes the key")
	})
	t.Run("distinct", func(t *testing.T) {
		seen := map[string]string{k1: secret}
		for i := range 1000 {
			s := secret + strconv.Itoa(i)
			k, err := key(s)
			require.NoError(t, err)
			if prev, ok := seen[k]; ok {
				t.Fatalf("KeyByAPIKey(%q) = KeyByAPIKey(%q) = %q", s, prev, k)
			}
			seen[k] = s
		}
	})
	t.Run("huge", func(t *testing.T) {
		big := strings.Repeat("k", 100_000)
		k, err := key(big)
		require.NoError(t, err)
		assert.Len(t, k, 25, "key of a 100 kB API key")
	})
	t.Run("known value", func(t *testing.T) {
		// sha256("abc") = ba7816bf8f01cfea414140de5dae2223...
		k, err := key("abc")
		require.NoError(t, err)
		assert.Equal(t, "ak:ungWv48Bz-pBQUDeXa4iIw", k)
	})
	for _, tc := range []struct {
		name   string
		values []string
	}{
		{"missing", nil},
		{"empty", []string{""}},
		{"spaces", []string{"  \t "}},
		{"empty first line", []string{"", secret}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := key(tc.values...)
			assert.ErrorIs(t, err, ErrMissingKey, "KeyByAPIKey(%q) = %q, %v", tc.values, k, err)
			assert.Empty(t, k)
		})
	}
}

type ctxKey struct{}

type userID int

func (u userID) String() string {
	if u == 0 {
		return ""
	}
	return "u" + strconv.Itoa(int(u))
}

func TestKeyByContextValue(t *testing.T) {
	long := strings.Repeat("x", maxUserIDLen+1)
	tests := []struct {
		name    string
		value   any
		want    string
		wantErr error
	}{
		{"string", "alice", "user:alice", nil},
		{"stringer", userID(42), "user:u42", nil},
		{"128 bytes kept", strings.Repeat("x", maxUserIDLen), "user:" + strings.Repeat("x", maxUserIDLen), nil},
		{"long hashed", long, hashKey("user#:", long), nil},
		{"missing", nil, "", ErrMissingKey},
		{"empty string", "", "", ErrMissingKey},
		{"empty stringer", userID(0), "", ErrMissingKey},
		{"wrong type", 42, "", ErrMissingKey},
	}
	kf := KeyByContextValue(ctxKey{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if tc.value != nil {
				r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, tc.value))
			}
			got, err := kf(r)
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr, "KeyByContextValue(%v) = %q, %v", tc.value, got, err)
				return
			}
			require.NoError(t, err, "KeyByContextValue(%v)", tc.value)
			assert.Equal(t, tc.want, got, "KeyByContextValue(%v) = %q, want %q", tc.value, got, tc.want)
		})
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, long))
	got, err := kf(r)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(got, "user#:"), "long ID key %q", got)
	assert.Len(t, got, len("user#:")+22, "long ID key %q", got)
}

func TestJoinKeys(t *testing.T) {
	tests := []struct {
		parts []string
		want  string
	}{
		{nil, ""},
		{[]string{""}, "0:"},
		{[]string{"abc", "de"}, "3:abc2:de"},
		{[]string{"a:b", "c"}, "3:a:b1:c"},
		{[]string{"a", "b:c"}, "1:a3:b:c"},
		{[]string{strings.Repeat("z", 12), ""}, "12:" + strings.Repeat("z", 12) + "0:"},
	}
	for _, tc := range tests {
		got := JoinKeys(tc.parts...)
		assert.Equal(t, tc.want, got, "JoinKeys(%q) = %q, want %q", tc.parts, got, tc.want)
	}

	// Lists that a naive separator would confuse.
	ambiguous := [][2][]string{
		{{"a:b", "c"}, {"a", "b:c"}},
		{{"ab", ""}, {"a", "b"}},
		{{"", "ab"}, {"ab"}},
		{{"1:a"}, {"a"}},
		{{"1:a", ""}, {"1:a1:"}},
		{{"a", "b", "c"}, {"a", "1:b1:c"}},
		{{"", ""}, {""}},
		{{"2:ab"}, {"ab", ""}},
	}
	for _, p := range ambiguous {
		assert.NotEqual(t, JoinKeys(p[0]...), JoinKeys(p[1]...), "JoinKeys(%q) = JoinKeys(%q)", p[0], p[1])
	}
}

func TestJoinKeyFuncs(t *testing.T) {
	route := func(r *http.Request) (string, error) { return r.Method + " " + r.URL.Path, nil }
	ip, err := KeyByIP()
	require.NoError(t, err)
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		fs      []KeyFunc
		want    string
		wantErr error
	}{
		{"route and IP", []KeyFunc{route, ip}, JoinKeys("GET /geo", "ip:192.0.2.1"), nil},
		{"one", []KeyFunc{ip}, JoinKeys("ip:192.0.2.1"), nil},
		{"none", nil, "", nil},
		{"first error", []KeyFunc{route, KeyByAPIKey("X-API-Key"), errFunc(errBoom)}, "", ErrMissingKey},
		{"error", []KeyFunc{route, errFunc(errBoom)}, "", errBoom},
		{"empty key", []KeyFunc{route, func(*http.Request) (string, error) { return "", nil }}, "", ErrEmptyKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/geo", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			got, err := JoinKeyFuncs(tc.fs...)(r)
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr, "JoinKeyFuncs(%s) = %q, %v", tc.name, got, err)
				assert.Empty(t, got)
				return
			}
			require.NoError(t, err, "JoinKeyFuncs(%s)", tc.name)
			assert.Equal(t, tc.want, got, "JoinKeyFuncs(%s) = %q, want %q", tc.name, got, tc.want)
		})
	}
	t.Run("nil function", func(t *testing.T) {
		got, err := JoinKeyFuncs(route, nil)(httptest.NewRequest(http.MethodGet, "/", nil))
		assert.Error(t, err, "JoinKeyFuncs(route, nil) = %q", got)
	})
	t.Run("caller slice copied", func(t *testing.T) {
		fs := []KeyFunc{route}
		kf := JoinKeyFuncs(fs...)
		fs[0] = errFunc(errBoom)
		_, err := kf(httptest.NewRequest(http.MethodGet, "/", nil))
		assert.NoError(t, err, "JoinKeyFuncs uses the caller's slice")
	})
}

func errFunc(err error) KeyFunc {
	return func(*http.Request) (string, error) { return "", err }
}

// splitKeys undoes JoinKeys.
func splitKeys(s string) ([]string, bool) {
	var parts []string
	for s != "" {
		i := strings.IndexByte(s, ':')
		if i <= 0 {
			return nil, false
		}
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 || n > len(s)-i-1 || strconv.Itoa(n) != s[:i] {
			return nil, false
		}
		parts = append(parts, s[i+1:i+1+n])
		s = s[i+1+n:]
	}
	return parts, true
}

func FuzzJoinKeys(f *testing.F) {
	f.Add("a:b", "c", "a", "b:c")
	f.Add("", "", "", "")
	f.Add("1:a", "", "", "1:a")
	f.Add("ab", "", "a", "b")
	f.Add("0:", "x", "", "0:x")
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		ab, cd := JoinKeys(a, b), JoinKeys(c, d)
		if ab == cd && (a != c || b != d) {
			t.Fatalf("JoinKeys(%q, %q) = JoinKeys(%q, %q) = %q", a, b, c, d, ab)
		}
		if ab != cd && a == c && b == d {
			t.Fatalf("JoinKeys(%q, %q) = %q and %q", a, b, ab, cd)
		}
		parts, ok := splitKeys(ab)
		if !ok || len(parts) != 2 || parts[0] != a || parts[1] != b {
			t.Fatalf("splitKeys(JoinKeys(%q, %q)) = %q, %v", a, b, parts, ok)
		}
	})
}

// fuzzKeyFuncs are KeyByIP configurations that read every header.
func fuzzKeyFuncs(t testing.TB) []KeyFunc {
	all := TrustedProxies("0.0.0.0/0", "::/0")
	some := TrustedProxies("10.0.0.0/8", "2001:db8::/32", "::ffff:192.0.2.0/120")
	var kfs []KeyFunc
	for _, o := range [][]IPOption{
		nil,
		{IPv6Prefix(64)},
		{all},
		{all, IPv6Prefix(56)},
		{some},
		{all, ProxyHeader("Forwarded")},
		{some, ProxyHeader("Forwarded"), IPv6Prefix(64)},
		{all, ProxyHeader("X-Real-IP")},
		{some, ProxyHeader("X-Real-IP"), IPv6Prefix(48)},
	} {
		kf, err := KeyByIP(o...)
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
				if !errors.Is(err, ErrNoClientIP) {
					t.Fatalf("config %d: key(%q, %q, %q) error %v does not wrap ErrNoClientIP", i, remote, xff, fwd, err)
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

// keyBytes keeps the benchmarks' results in use.
var keyBytes atomic.Int64

func BenchmarkKeyByIP(b *testing.B) {
	trusted := TrustedProxies("10.0.0.0/8", "172.16.0.0/12", "2001:db8::/32")
	benches := []struct {
		name   string
		opts   []IPOption
		remote string
		header string
		value  string
	}{
		{"RemoteAddr", nil, "203.0.113.7:51234", "", ""},
		{"RemoteAddrIPv6Prefix", opts(IPv6Prefix(64)), "[2001:db9:1:2:3:4:5:6]:51234", "", ""},
		{"XFF", opts(trusted), "10.0.0.5:51234", "X-Forwarded-For", "198.51.100.7, 172.16.0.9, 10.0.0.1"},
		{"Forwarded", opts(trusted, ProxyHeader("Forwarded")), "10.0.0.5:51234", "Forwarded",
			`for=198.51.100.7;proto=https, for="[2001:db8::9]:443", for=10.0.0.1`},
		{"XRealIP", opts(trusted, ProxyHeader("X-Real-IP")), "10.0.0.5:51234", "X-Real-Ip", "198.51.100.7"},
	}
	for _, bc := range benches {
		b.Run(bc.name, func(b *testing.B) {
			kf, err := KeyByIP(bc.opts...)
			require.NoError(b, err)
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = bc.remote
			if bc.header != "" {
				r.Header.Set(bc.header, bc.value)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				n := 0
				for pb.Next() {
					k, err := kf(r)
					if err != nil {
						panic(err)
					}
					n += len(k)
				}
				keyBytes.Add(int64(n))
			})
		})
	}
}

func BenchmarkKeyByAPIKey(b *testing.B) {
	kf := KeyByAPIKey("X-API-Key")
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-API-Key", "sk_live_51H8f3kLmN0pQrStUvWxYz0123456789")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		for pb.Next() {
			k, err := kf(r)
			if err != nil {
				panic(err)
			}
			n += len(k)
		}
		keyBytes.Add(int64(n))
	})
}

func BenchmarkJoinKeys(b *testing.B) {
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n += len(JoinKeys("GET /v1/geocode", "ip:203.0.113.7"))
	}
	if n == 0 {
		b.Fatal("no keys")
	}
}

func TestKeyByAddrAndValueKey(t *testing.T) {
	key, err := KeyByAddr(IPv6Prefix(64))
	require.NoError(t, err)
	for addr, want := range map[string]string{
		"203.0.113.7":        "ip:203.0.113.7",
		"203.0.113.7:443":    "ip:203.0.113.7",
		"::ffff:192.0.2.1":   "ip:192.0.2.1",
		"[2001:db8::1]:8080": "ip:2001:db8::/64",
		"fe80::1%eth0":       "ip:fe80::/64",
	} {
		got, err := key(addr)
		require.NoError(t, err, addr)
		assert.Equal(t, want, got, "KeyByAddr()(%q)", addr)
	}
	for _, bad := range []string{"", "garbage", "0.0.0.0", "1.2.3.4:99999"} {
		_, err := key(bad)
		assert.ErrorIs(t, err, ErrNoClientIP, "%q", bad)
	}
	_, err = KeyByAddr(IPv6Prefix(0))
	assert.Error(t, err)

	k, err := ValueKey("u-42")
	require.NoError(t, err)
	assert.Equal(t, "user:u-42", k)
	for _, v := range []any{nil, "", 42} {
		_, err := ValueKey(v)
		assert.ErrorIs(t, err, ErrMissingKey, "%v", v)
	}
}
