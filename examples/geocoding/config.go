package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // -tz on a machine without a zoneinfo database

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/failover"
)

// config holds the server's settings, one field per flag of the demo server
// contract (DESIGN.md, "Contract 1").
type config struct {
	addr           string
	framework      string
	algorithm      ratelimit.Algorithm
	rate           float64
	burst          int64
	key            string
	trustedProxies string
	ipv6Prefix     int
	globalRate     float64
	globalBurst    int64
	headers        ratelimit.HeaderFormat
	store          string
	redisURL       string
	redisSentinel  string   // -redis-sentinel: MASTER@HOST:PORT,..., "" for none
	redisCluster   string   // -redis-cluster: HOST:PORT,..., "" for none
	redisGiven     []string // those of redisFlags given on the command line (run fills it, with flag.Visit)
	onStoreError   failover.Mode
	instances      int
	dryRun         bool
	count          string
	skipPath       string
	maxInflight    int
	maxInflightAll int // -max-inflight-total
	maxQueued      int
	refusalCache   bool
	lease          time.Duration
	banAfter       int64
	banWithin      time.Duration
	banFor         time.Duration
	block, safe    string
	adminToken     string
	daily, monthly int64  // -daily, -monthly: calendar quotas, 0 for none
	dailyBytes     int64  // -daily-bytes: a daily quota of response bytes, 0 for none
	tz             string // -tz: the time zone of the quotas' days and months
	plans          string // -plans: the file of the plans per API key
	grpcAddr       string // -grpc-addr: the gRPC listener's address, "" for none

	// otlp is -otlp, the URL of an OTLP/HTTP receiver of the metrics, ""
	// for none, and otlpInterval -otlp-interval, how often they go there.
	otlp         string
	otlpInterval time.Duration

	// clock, when not nil, is the time source of the stores and of the
	// header fields instead of the system's clock. Only tests set it; main
	// leaves it nil.
	clock func() time.Time
	// logHandler, when not nil, is the handler of the server's log instead
	// of slog.Default's. Only tests set it; main leaves it nil.
	logHandler slog.Handler
	// planPoll, when not 0, is how often the -plans file is looked at
	// instead of planPollEvery. Only tests set it.
	planPoll time.Duration
}

// newFlagSet returns the flag set that fills cfg. Its defaults are those of
// the contract. The library's enumerations parse themselves (flag.TextVar):
// a wrong value is reported with the flag, the value and the valid names.
func newFlagSet(cfg *config) *flag.FlagSet {
	fs := flag.NewFlagSet("geocoding", flag.ContinueOnError)
	fs.StringVar(&cfg.addr, "addr", ":8080", "listen `address`")
	fs.StringVar(&cfg.framework, "framework", "nethttp", "HTTP framework: nethttp, gin or echo")
	fs.TextVar(&cfg.algorithm, "algorithm", ratelimit.TokenBucket, "the `algorithm`: token-bucket, leaky-police or leaky-shape")
	fs.Float64Var(&cfg.rate, "rate", 5, "tokens earned per second by each client")
	fs.Int64Var(&cfg.burst, "burst", 10, "bucket capacity: the most requests a client may make at once")
	fs.StringVar(&cfg.key, "key", "api-key", "what identifies a client: api-key (header X-API-Key) or ip")
	fs.StringVar(&cfg.trustedProxies, "trusted-proxies", "", "comma-separated `CIDRs` of the reverse proxies whose X-Forwarded-For is believed (with -key ip, -block and -safe)")
	fs.IntVar(&cfg.ipv6Prefix, "ipv6-prefix", 0, "`bits` by which IPv6 clients are grouped with -key ip (0: the library's default, 64; 128: every address on its own)")
	fs.Float64Var(&cfg.globalRate, "global-rate", 0, "tokens per second shared by all clients (0: no global limit)")
	fs.Int64Var(&cfg.globalBurst, "global-burst", 0, "capacity of the global limit (0: no global limit)")
	fs.TextVar(&cfg.headers, "headers", ratelimit.HeadersIETF, "the `format` of the rate-limit header fields: ietf, legacy, x or none")
	fs.StringVar(&cfg.store, "store", "memory", "where limits are kept: memory or redis")
	fs.StringVar(&cfg.redisURL, "redis-url", "redis://127.0.0.1:6379/0", "Redis `URL` (with -store redis): redis://[:PASSWORD@]HOST:PORT/DB, rediss://... for TLS, or unix:///PATH?db=DB")
	fs.StringVar(&cfg.redisSentinel, "redis-sentinel", "", "with -store redis, a master watched by Sentinels, `MASTER@HOST:PORT[,HOST:PORT...]`: the store follows a failover to the promoted replica (instead of -redis-url)")
	fs.StringVar(&cfg.redisCluster, "redis-cluster", "", "with -store redis, the seed nodes of a Redis Cluster, `HOST:PORT[,HOST:PORT...]` (instead of -redis-url)")
	fs.TextVar(&cfg.onStoreError, "on-store-error", failover.Open, "what to do while the store fails (`mode`): open (the default: while Redis is unavailable every request is served without a limit), closed (503 with Retry-After) or local (each instance limits by its share of each quota, 1/-instances)")
	fs.IntVar(&cfg.instances, "instances", 1, "number of server instances, to share the quota of the local fallback")
	fs.BoolVar(&cfg.dryRun, "dry-run", false, "decide and count, but never refuse")
	fs.StringVar(&cfg.count, "count", "all", "which responses spend the budget: all, failed or successful")
	fs.StringVar(&cfg.skipPath, "skip-path", "", "path `prefix` that is never limited nor counted")
	fs.IntVar(&cfg.maxInflight, "max-inflight", 0, "concurrent requests per client (0: no limit)")
	fs.IntVar(&cfg.maxInflightAll, "max-inflight-total", 0, "concurrent requests of all clients (0: no limit)")
	fs.IntVar(&cfg.maxQueued, "max-queued", 0, "requests waiting in -algorithm leaky-shape queues, across all clients (0: the library's default, 256; -1: no bound)")
	fs.BoolVar(&cfg.refusalCache, "refusal-cache", true, "with -store redis, refuse locally what the store's last answer already refuses")
	fs.DurationVar(&cfg.lease, "lease", 0, "with -store redis, `duration` of token leases: a busy client's tokens taken several at a time and spent locally (0: no leases)")
	fs.Int64Var(&cfg.banAfter, "ban-after", 0, "refusals after which a client is banned (0: no penalty box)")
	fs.DurationVar(&cfg.banWithin, "ban-within", 0, "the `span` within which -ban-after refusals ban")
	fs.DurationVar(&cfg.banFor, "ban-for", 0, "how long a ban lasts (`duration`)")
	fs.StringVar(&cfg.block, "block", "", "comma-separated `CIDRs` of clients refused with 403 before any limiting, with any -key; the client address is found as with -key ip")
	fs.StringVar(&cfg.safe, "safe", "", "comma-separated `CIDRs` of clients never limited nor counted, with any -key; -block wins over -safe")
	fs.StringVar(&cfg.adminToken, "admin-token", "", "bearer `token` of POST /admin/reset?key=KEY (none: no admin endpoint)")
	fs.Int64Var(&cfg.daily, "daily", 0, "requests per calendar day for each client, on top of -rate (0: no daily quota)")
	fs.Int64Var(&cfg.monthly, "monthly", 0, "requests per calendar month for each client, on top of -rate (0: no monthly quota)")
	fs.Int64Var(&cfg.dailyBytes, "daily-bytes", 0, "bytes of response bodies per calendar day for each client, on top of -rate, -daily and -monthly (0: no quota of bytes)")
	fs.StringVar(&cfg.tz, "tz", "UTC", "the time `zone` of the days and months of -daily, -monthly and -daily-bytes, an IANA name such as Europe/Paris")
	fs.StringVar(&cfg.grpcAddr, "grpc-addr", "", "listen `address` of the gRPC server of geocoding.v1.Geocoder, plaintext HTTP/2, such as :9090 (none: no gRPC listener)")
	fs.StringVar(&cfg.otlp, "otlp", "", "`URL` of an OTLP/HTTP receiver, such as http://localhost:4318, to which the library's OpenTelemetry metrics are pushed (POST URL/v1/metrics, protobuf) (none: no push)")
	fs.DurationVar(&cfg.otlpInterval, "otlp-interval", 10*time.Second, "how often the metrics are pushed to -otlp, and once more at shutdown (`duration`)")
	fs.StringVar(&cfg.plans, "plans", "", "JSON `file` of limits per API key, {\"KEY\": {\"rate\": R, \"burst\": B, \"daily\": D, \"monthly\": M}}, reread when it changes and on SIGHUP")
	return fs
}

// choices lists, for each flag of the demo's own that takes one of a fixed
// set of values, the values that this version implements (supported) and the
// other values that the contract defines (later).
var choices = []struct {
	flag      string
	value     func(*config) string
	supported []string
	later     []string
}{
	{"framework", func(c *config) string { return c.framework }, []string{"nethttp", "gin", "echo"}, nil},
	{"key", func(c *config) string { return c.key }, []string{"api-key", "ip"}, nil},
	{"store", func(c *config) string { return c.store }, []string{"memory", "redis"}, nil},
	{"count", func(c *config) string { return c.count }, []string{"all", "failed", "successful"}, nil},
}

// check reports every flag whose value is invalid or not implemented yet, one
// error per flag. The rate, burst, trusted proxies and address lists are
// validated by the library, in newHandler.
func (c *config) check() error {
	var errs []error
	invalid := func(name, value, want string) {
		errs = append(errs, fmt.Errorf("-%s %s: %s", name, value, want))
	}
	unsupported := func(name, value string) {
		errs = append(errs, fmt.Errorf("-%s %s is not supported yet", name, value))
	}
	for _, ch := range choices {
		v := ch.value(c)
		switch {
		case slices.Contains(ch.supported, v):
		case slices.Contains(ch.later, v):
			unsupported(ch.flag, v)
		default:
			invalid(ch.flag, v, "want "+orList(append(slices.Clip(ch.supported), ch.later...)))
		}
	}
	if b := c.burst; b < 1 {
		invalid("burst", strconv.FormatInt(b, 10), "want a capacity of at least 1")
	}
	if r := c.globalRate; math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
		invalid("global-rate", formatFloat(r), "want a finite number of tokens per second, or 0 for no global limit")
	}
	switch b := c.globalBurst; {
	case b < 0:
		invalid("global-burst", strconv.FormatInt(b, 10), "want a capacity of at least 1, or 0 for no global limit")
	case b > 0 && c.globalRate == 0:
		invalid("global-burst", strconv.FormatInt(b, 10), "needs -global-rate")
	}
	if p := c.ipv6Prefix; p < 0 || p > 128 {
		invalid("ipv6-prefix", strconv.Itoa(p), "want 1 to 128 bits, or 0 for the library's default (64)")
	}
	if n := c.instances; n < 1 {
		invalid("instances", strconv.Itoa(n), "want at least 1")
	}
	if p := c.skipPath; p != "" && !strings.HasPrefix(p, "/") {
		invalid("skip-path", p, "want a path prefix starting with /")
	}
	if n := c.maxInflight; n < 0 {
		invalid("max-inflight", strconv.Itoa(n), "want a number of requests, or 0 for no limit")
	}
	if n := c.maxInflightAll; n < 0 {
		invalid("max-inflight-total", strconv.Itoa(n), "want a number of requests, or 0 for no limit")
	}
	if n := c.maxQueued; n < -1 {
		invalid("max-queued", strconv.Itoa(n), "want a number of requests, 0 for the library's default (256), or -1 for no bound")
	}
	errs = append(errs, c.checkRedisFlags()...)
	if d := c.lease; d != 0 && c.store != "redis" {
		invalid("lease", d.String(), "needs -store redis")
	}
	switch {
	case c.banAfter < 0:
		invalid("ban-after", strconv.FormatInt(c.banAfter, 10), "want a number of refusals, or 0 for no penalty box")
	case c.banAfter == 0 && (c.banWithin != 0 || c.banFor != 0):
		invalid("ban-after", "0", "-ban-within and -ban-for need -ban-after")
	case c.banAfter > 0 && c.banFor <= 0:
		invalid("ban-for", c.banFor.String(), "want a positive duration with -ban-after")
	case c.banAfter > 1 && c.banWithin <= 0:
		invalid("ban-within", c.banWithin.String(), "want a positive duration with -ban-after above 1")
	}
	for _, q := range []struct {
		flag, unit string
		n          int64
	}{{"daily", "requests", c.daily}, {"monthly", "requests", c.monthly}, {"daily-bytes", "bytes", c.dailyBytes}} {
		if q.n < 0 || q.n > maxQuota {
			invalid(q.flag, strconv.FormatInt(q.n, 10), fmt.Sprintf("want a quota of 1 to %d %s, or 0 for none", int64(maxQuota), q.unit))
		}
	}
	if _, err := time.LoadLocation(c.tz); err != nil {
		invalid("tz", c.tz, "unknown time zone; want an IANA name such as Europe/Paris, or UTC")
	}
	if a := c.grpcAddr; a != "" {
		if err := checkListenAddr(a); err != nil {
			invalid("grpc-addr", a, err.Error())
		} else if a == c.addr && !strings.HasSuffix(a, ":0") { // port 0 is any free port
			invalid("grpc-addr", a, "the address of -addr, whose port serves Connect, gRPC and gRPC-Web already; want another")
		}
	}
	if c.plans != "" && c.key != "api-key" {
		invalid("plans", c.plans, "needs -key api-key: its keys are API keys")
	}
	if u := c.otlp; u != "" {
		if err := checkOTLP(u); err != nil {
			invalid("otlp", u, err.Error())
		}
	}
	if d := c.otlpInterval; d <= 0 {
		invalid("otlp-interval", d.String(), "want a positive duration, such as 10s")
	}
	return errors.Join(errs...)
}

// checkListenAddr reports why addr is not a TCP address to listen on,
// host:port, with a port number or a service name (the host may be empty,
// for every interface); it looks nothing up but the service name.
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want host:port, such as :9090 or 127.0.0.1:9090")
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("want a port number from 0 to 65535 after the colon, not %q", port)
	}
	return nil
}

// maxQuota is the largest calendar quota, the library's.
const maxQuota = 1_000_000_000_000

// orList returns "a, b or c".
func orList(vs []string) string {
	if len(vs) < 2 {
		return strings.Join(vs, "")
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " or " + vs[len(vs)-1]
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// limitOf returns the Limit of rate tokens per second, a float as the flags
// give it, with a capacity of burst (at least 1). It is written as n tokens
// per period with whole n and period, so that its interval is 1s/rate
// rounded to the nanosecond and the w of RateLimit-Policy is exactly
// ⌈burst/rate⌉ seconds: 5 is 5/s, 0.25 is 1/4s, 1.7 is 17/10s, and a rate that no
// decimal of up to six places writes exactly takes the period that earns
// the burst, burst × 1s/rate rounded to the nanosecond. ratelimit.New
// reports a bucket that would take more than 50 years to fill.
func limitOf(rate float64, burst int64) (ratelimit.Limit, error) {
	switch {
	case math.IsNaN(rate) || math.IsInf(rate, 0) || rate <= 0:
		return ratelimit.Limit{}, errors.New("want a positive, finite number of tokens per second")
	case rate > 2e9: // 1s/rate rounds to 0
		return ratelimit.Limit{}, errors.New("more than one token per nanosecond")
	}
	for k := int64(1); k <= 1e6; k *= 10 {
		if n := math.Round(rate * float64(k)); n >= 1 && n/float64(k) == rate {
			g := gcd(int64(n), k)
			return ratelimit.Per(int64(n)/g, time.Duration(k/g)*time.Second).WithBurst(burst), nil
		}
	}
	period := math.Round(float64(burst) * float64(time.Second) / rate)
	if period > math.MaxInt64/2 { // beyond ratelimit.New's 50 years anyway
		return ratelimit.Limit{}, fmt.Errorf("an empty bucket would take %.3g years to fill, more than 50", period/float64(365*24*time.Hour))
	}
	return ratelimit.Per(burst, time.Duration(period)), nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
