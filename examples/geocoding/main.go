// Geocoding is the demo server of github.com/tokenfair/ratelimit: a small
// geocoding API over a built-in table of well-known places, behind the rate
// limiter. It needs no setup; limits are kept in memory.
//
// From the repository root:
//
//	go run ./examples/geocoding
//
// and in another terminal:
//
//	curl -s -H 'X-API-Key: demo' 'localhost:8080/geocode?q=paris'
//	{"query":"paris","name":"Paris","lat":48.8566,"lon":2.3522}
//
// Every API key may make 10 requests at once (-burst) and earns 5 more each
// second (-rate), so a quick loop of twelve requests gets ten 200s and then
// two 429 Too Many Requests:
//
//	for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code}\n' -H 'X-API-Key: demo' 'localhost:8080/geocode?q=paris'; done
//
// Another key has a bucket of its own, a request without a key is refused
// with 401, and curl -i shows the rate-limit header fields, and on a 429 the
// Retry-After field and the problem body:
//
//	curl -i -H 'X-API-Key: demo' 'localhost:8080/geocode?q=tokyo'
//	HTTP/1.1 200 OK
//	Content-Type: application/json
//	RateLimit: "default";r=9;t=1
//	RateLimit-Policy: "default";q=10;w=2
//	...
//
//	HTTP/1.1 429 Too Many Requests
//	Cache-Control: no-store
//	Content-Type: application/problem+json
//	RateLimit: "default";r=0;t=1
//	RateLimit-Policy: "default";q=10;w=2
//	Retry-After: 1
//
//	{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"Too many requests; retry after 1 s.","violated-policies":["default"]}
//
// To limit by client IP address instead, behind a proxy in 10.0.0.0/8:
//
//	go run ./examples/geocoding -key ip -trusted-proxies 10.0.0.0/8
//
// To refuse a scraper's network with 403 before any limiting, and never
// limit the office network:
//
//	go run ./examples/geocoding -key ip -block 203.0.113.0/24 -safe 10.0.0.0/8
//
// The lists work with -key api-key too: the client address is found as
// with -key ip, through -trusted-proxies, whatever the key.
//
// To guard a login form, ban a client for ten minutes once it has been
// refused 5 times in quick succession (its strikes come back at 4 a minute;
// every request of a banned client gets a 429 naming the ban, with the rest
// of the ban in Retry-After):
//
//	go run ./examples/geocoding -key ip -rate 0.1 -burst 5 -ban-after 5 -ban-within 1m -ban-for 10m
//
// To sell 2 500 requests a day, reset at midnight in Paris, on top of the
// rate, with plans per API key that the server reads again when the file
// changes (and on SIGHUP), and look up several places at once:
//
//	echo '{"gold": {"rate": 50, "burst": 100, "daily": 100000}}' > plans.json
//	go run ./examples/geocoding -daily 2500 -tz Europe/Paris -plans plans.json
//	printf 'paris\natlantis\ntokyo\n' | curl -s -H 'X-API-Key: demo' --data-binary @- localhost:8080/geocode/batch
//
// The batch reserves a token per name, of the rate and of each quota, and
// keeps one per place found: here two.
//
// To cap what each key downloads too, at a megabyte of response bodies a
// day (RateLimit-Policy then lists "daily-bytes";q=1000000;qu="content-bytes"):
//
//	go run ./examples/geocoding -daily 2500 -daily-bytes 1000000
//
// To serve gRPC as well, on its own port, with the same limits (one quota
// per key, whichever way a client comes), and call it with grpcurl, which
// needs no .proto file since reflection is on:
//
//	go run ./examples/geocoding -grpc-addr :9090
//	grpcurl -plaintext localhost:9090 list
//	grpcurl -plaintext -H 'x-api-key: demo' -d '"paris"' localhost:9090 geocoding.v1.Geocoder/Geocode
//	grpcurl -plaintext -H 'x-api-key: demo' -d '"paris" "tokyo"' localhost:9090 geocoding.v1.Geocoder/GeocodeStream
//
// The HTTP port answers Geocode too, with or without -grpc-addr, for
// Connect, gRPC and gRPC-Web clients; in the Connect protocol, it is a
// POST of JSON:
//
//	curl -s -H 'X-API-Key: demo' -H 'Content-Type: application/json' -d '"paris"' localhost:8080/geocoding.v1.Geocoder/Geocode
//	{"lat":48.8566,"lon":2.3522,"name":"Paris"}
//
// # Endpoints
//
//   - GET /geocode?q=NAME: 200 with {"query","name","lat","lon"} for a known
//     place (case is ignored: paris, Tokyo, new york, ...); 404 for an
//     unknown one; 400 without q. Errors are application/problem+json.
//     Other methods get 405.
//   - POST /geocode/batch: a body of place names, one per line (blank
//     lines skipped, CRLF accepted, at most 100 names, else 400 before any
//     token is taken); 200 with a JSON array of the results of GET /geocode
//     for the places found, in order. It is admitted only if every policy
//     of the key holds a token per name, and charged one per place found.
//   - POST /geocoding.v1.Geocoder/Geocode: the gRPC method below, for the
//     Connect, gRPC (HTTP/2 without TLS, h2c) and gRPC-Web protocols. It is
//     limited as /geocode is, in the same buckets, but a refusal is
//     answered in the caller's protocol, before the body is read: Connect
//     gets 429 with a Connect error, resource_exhausted, gRPC and gRPC-Web
//     a trailers-only grpc-status 8 (RESOURCE_EXHAUSTED); both carry a
//     google.rpc.RetryInfo and a google.rpc.QuotaFailure, and gRPC's the
//     grpc-retry-pushback-ms trailer.
//   - GET /healthz: 200 "ok", never limited.
//   - POST /admin/reset?key=KEY with Authorization: Bearer TOKEN, only with
//     -admin-token TOKEN: forgets the client's state under every per-client
//     policy (204), never limited by the API's limits; KEY is the client's
//     API key, or with -key ip its IP address. A wrong or missing token
//     gets 401; past 5 failed tokens a minute from one client address, or
//     60 from all, every admin request gets 429 with Retry-After, and
//     failures are logged once a minute (see admin.go, adminlimit.go).
//
// Every request except /healthz and the admin endpoint goes through the
// limiter, including those that end in 404 or 405.
//
// # gRPC
//
// With -grpc-addr, a gRPC server (plaintext HTTP/2) serves the service
// geocoding.v1.Geocoder, over the protobuf well-known types:
//
//   - Geocode(google.protobuf.StringValue) returns (google.protobuf.Struct):
//     the place's name, lat and lon; NOT_FOUND for an unknown place,
//     INVALID_ARGUMENT for an empty name. A call costs one token.
//   - GeocodeStream(stream StringValue) returns (stream Struct): each name
//     is answered by one message, in order; each costs one token (opening
//     the stream costs nothing). An unknown or empty name, or a name
//     refused by the limiter, ends the stream with its status.
//
// It shares the HTTP side's limiters, policies and keys: the API key is
// the metadata x-api-key (missing: UNAUTHENTICATED); with -key ip the
// client is the peer's address, or through -trusted-proxies the
// x-forwarded-for metadata. A refusal is RESOURCE_EXHAUSTED with a
// RetryInfo (the wait, rounded up to the millisecond) and a QuotaFailure
// naming each refusing policy, and the trailer grpc-retry-pushback-ms, the
// wait in milliseconds, or -1 past five minutes (a spent -daily or
// -monthly quota: no automatic retry); every answer's metadata carries
// ratelimit-policy and ratelimit as the HTTP fields would (per -headers).
// -on-store-error closed answers UNAVAILABLE with a RetryInfo while the
// store is down. Server reflection (grpc.reflection.v1 and v1alpha) is on
// and never limited.
//
// # Flags
//
//	-addr            listen address [:8080]
//	-framework       nethttp|gin|echo [nethttp]
//	-algorithm       token-bucket|leaky-police|leaky-shape [token-bucket]
//	-rate            tokens per second for each client [5]
//	-burst           capacity of each client's bucket [10]
//	-key             api-key|ip [api-key]; the API key is read from X-API-Key
//	-trusted-proxies comma-separated CIDRs of trusted reverse proxies [none];
//	                 with -key ip, -block and -safe the client is then the
//	                 rightmost X-Forwarded-For entry that is not a trusted
//	                 proxy; without, forwarding headers are ignored
//	-ipv6-prefix     bits by which IPv6 clients are grouped with -key ip
//	                 [0: the library's default, a /64; 128: each address]
//	-global-rate     tokens per second shared by all clients [0: none]
//	-global-burst    capacity of the global limit [0: none]
//	-headers         ietf|legacy|x|none [ietf]
//	-store           memory|redis [memory]
//	-redis-url       Redis URL for -store redis [redis://127.0.0.1:6379/0]:
//	                 redis://[:PASSWORD@]HOST:PORT/DB, rediss://... for
//	                 TLS, or unix:///PATH?db=DB
//	-redis-sentinel  MASTER@HOST:PORT[,HOST:PORT...]: with -store redis, a
//	                 master watched by Sentinels, followed to the promoted
//	                 replica on a failover [none]
//	-redis-cluster   HOST:PORT[,HOST:PORT...]: with -store redis, the seed
//	                 nodes of a Redis Cluster [none]; at most one of
//	                 -redis-url, -redis-sentinel and -redis-cluster is given
//	-on-store-error  open|closed|local [open]: while the store fails, open
//	                 serves every request without a limit (and no
//	                 RateLimit fields), closed answers 503 with Retry-After,
//	                 local limits each instance to its share of each quota
//	                 (1/-instances) and answers with that share's fields
//	-instances       instance count for the local fallback [1]
//	-dry-run         decide and count, never refuse [false]
//	-count           all|failed|successful: responses that spend the budget [all]
//	-skip-path       path prefix never limited nor counted [none]
//	-max-inflight    concurrent requests per client [0: no limit]
//	-max-inflight-total concurrent requests of all clients [0: no limit]
//	-max-queued      requests waiting in leaky-shape queues, across all
//	                 clients [0: the library's default, 256; -1: no bound]
//	-refusal-cache   with -store redis, refuse locally what the store's last
//	                 answer already refuses [true]
//	-lease           with -store redis, how long a token lease lasts: a busy
//	                 client's tokens taken several at a time and spent
//	                 locally [0: no leases]
//	-ban-after       refusals that ban a client [0: no penalty box]
//	-ban-within      the span in which -ban-after refusals ban
//	-ban-for         how long a ban lasts
//	-block           comma-separated CIDRs of clients refused with 403
//	                 before any limiting, with any -key [none]
//	-safe            comma-separated CIDRs of clients never limited nor
//	                 counted, with any -key [none]; -block wins over -safe
//	-admin-token     bearer token of POST /admin/reset [none: no endpoint]
//	-grpc-addr       listen address of the gRPC server, plaintext HTTP/2,
//	                 such as :9090 [none: no gRPC listener]; its calls
//	                 share the HTTP side's limits (see gRPC above)
//	-otlp            URL of an OTLP/HTTP receiver (a collector, such as
//	                 http://localhost:4318) to which the library's
//	                 OpenTelemetry metrics are pushed, in protobuf, with
//	                 POST URL/v1/metrics; rate_limiting.requests counts as
//	                 ratelimit_decisions_total does; service.name is
//	                 geocoding unless OTEL_SERVICE_NAME says otherwise
//	                 [none: no push]
//	-otlp-interval   how often the metrics are pushed to -otlp, and once
//	                 more at shutdown [10s]
//	-daily           requests per calendar day for each client, resetting at
//	                 00:00 in -tz, on top of -rate (policy "daily") [0: none]
//	-monthly         requests per calendar month, resetting at 00:00 on the
//	                 1st (policy "monthly") [0: none]
//	-daily-bytes     bytes of response bodies per calendar day for each
//	                 client, resetting at 00:00 in -tz, on top of -rate,
//	                 -daily and -monthly (policy "daily-bytes", listed with
//	                 qu="content-bytes") [0: none]: each request reserves a
//	                 byte and, once answered, is charged the bytes of its
//	                 body, whatever its status (an empty body, as a HEAD's,
//	                 costs 1; a 429 of the limiter's, nothing); a request
//	                 passes while a byte is left, and the response that
//	                 crosses the quota is charged in full, whatever -count
//	                 says of its requests
//	-tz              IANA time zone of the days and months [UTC]
//	-plans           JSON file of limits per API key [none]:
//	                 {"KEY": {"rate": R, "burst": B, "daily": D, "monthly": M}},
//	                 every field optional (missing: the flag's value; daily
//	                 or monthly 0: none; -daily-bytes is every key's); read
//	                 again within a second of a change and on SIGHUP; an
//	                 invalid file is refused whole, naming its line: at
//	                 start-up with the exit status 2, later in the log,
//	                 keeping the plans last read
//
// Invalid values are refused with a message naming the flag, and the exit
// status 2.
//
// The three frameworks answer every request alike, with the same status,
// header fields and body: Gin runs in release mode with ginlimit, Echo with
// echolimit writing its own answers (so that a "pretty" query parameter
// does not indent them), and the same handlers write the 400, 404 and 405
// answers.
//
// The server logs to standard error, naming its store (memory, or redis and
// the address, never the password) and the gRPC address, if any, on its
// start-up line, and shuts down gracefully, both servers within five
// seconds, on SIGINT or SIGTERM: a request, call or stream still running
// then is cut off, and the exit status is 1. With -store redis it pings
// Redis once at start-up; if Redis does not answer, it logs the address
// and the cause (a rediss:// URL for a server without TLS, or the
// reverse, is named so) and serves anyway, as -on-store-error says. With
// -on-store-error open, the default, it warns at start-up that while
// Redis is unavailable every request is served without a limit.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	// The library logs (warnings, store failures) with slog.Default: make
	// its lines look like the server's own.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// shutdownTimeout bounds the graceful shutdown.
const shutdownTimeout = 5 * time.Second

// writeTimeout is the server's WriteTimeout: a response not written by then
// is lost. maxShapingWait, the longest wait in a leaky-shape queue (its
// policy's MaxDelay when the queue's room, burst / rate, is longer),
// leaves a second of it to the handler, so that a request that waits its
// turn can still be answered.
const (
	writeTimeout   = 10 * time.Second
	maxShapingWait = writeTimeout - time.Second
)

// run is the whole program: it parses args, serves until ctx is cancelled,
// then shuts down gracefully, and returns the exit status: 0 after a clean
// shutdown or -h (whose usage goes to stdout), 2 for a bad command line, 1
// when the server cannot listen or serve.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg config
	fs := newFlagSet(&cfg)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: go run ./examples/geocoding [flags]\n\nServes GET /geocode?q=NAME, POST /geocode/batch and, for Connect, gRPC and gRPC-Web, geocoding.v1.Geocoder/Geocode behind the rate limiter.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		report(stderr, err)
		fs.SetOutput(stderr)
		fs.Usage()
		return 2
	}
	cfg.redisGiven = givenFlags(fs, redisFlags)
	if fs.NArg() > 0 {
		report(stderr, fmt.Errorf("unexpected argument %q: the server takes only flags", fs.Arg(0)))
		return 2
	}
	if err := cfg.check(); err != nil {
		report(stderr, err)
		return 2
	}
	s, err := newServers(cfg)
	if err != nil {
		report(stderr, err)
		return 2
	}
	defer s.close()

	logger := slog.New(slog.NewTextHandler(stderr, nil))
	warnUnprotected(cfg, logger)
	pingRedis(ctx, cfg, logger)
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		logger.Error("geocoding: cannot listen", "addr", cfg.addr, "err", err)
		return 1
	}
	var grpcLn net.Listener
	if s.grpc != nil {
		if grpcLn, err = net.Listen("tcp", cfg.grpcAddr); err != nil {
			ln.Close()
			logger.Error("geocoding: cannot listen", "grpc-addr", cfg.grpcAddr, "err", err)
			return 1
		}
	}
	srv := newHTTPServer(s.http, logger)
	served := make(chan error, 2) // from each server
	running := 1
	go func() { served <- srv.Serve(ln) }()
	attrs := append(append(storeAttrs(cfg),
		"key", cfg.key, "rate", cfg.rate, "burst", cfg.burst, "headers", cfg.headers), quotaAttrs(cfg)...)
	if grpcLn != nil {
		running++
		go func() { served <- s.grpc.Serve(grpcLn) }()
		attrs = append(attrs, "grpc", grpcLn.Addr().String())
	}
	logger.Info("geocoding: listening on http://"+ln.Addr().String(), attrs...)

	select {
	case err := <-served:
		logger.Error("geocoding: serve failed", "err", err)
		srv.Close()
		if s.grpc != nil {
			s.grpc.Stop()
		}
		for range running - 1 {
			<-served
		}
		return 1
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	grpcStopped := make(chan error, 1)
	go func() { grpcStopped <- stopGRPC(sctx, s.grpc) }()
	code := 0
	if err := srv.Shutdown(sctx); err != nil {
		logger.Error("geocoding: graceful shutdown failed; closing", "err", err)
		srv.Close()
		code = 1
	}
	if err := <-grpcStopped; err != nil {
		logger.Error("geocoding: graceful shutdown of the gRPC server failed; closed", "err", err)
		code = 1
	}
	for range running {
		<-served // http.ErrServerClosed, and nil from the gRPC server
	}
	if code == 0 {
		logger.Info("geocoding: stopped")
	}
	return code
}

// newHTTPServer returns the server of handler, logging to logger. It
// speaks HTTP/1.1 and HTTP/2 without TLS (h2c, with prior knowledge), for
// the gRPC clients of the RPC route.
func newHTTPServer(handler http.Handler, logger *slog.Logger) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           handler,
		Protocols:         &protocols,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// quotaAttrs returns the log attributes of the calendar quotas and the
// plans of cfg, if any.
func quotaAttrs(cfg config) []any {
	var attrs []any
	if cfg.daily > 0 {
		attrs = append(attrs, "daily", cfg.daily)
	}
	if cfg.monthly > 0 {
		attrs = append(attrs, "monthly", cfg.monthly)
	}
	if cfg.dailyBytes > 0 {
		attrs = append(attrs, "daily-bytes", cfg.dailyBytes)
	}
	if cfg.plans != "" {
		attrs = append(attrs, "plans", cfg.plans)
	}
	if attrs != nil {
		attrs = append(attrs, "tz", cfg.tz)
	}
	return attrs
}

// report writes err to w, one "geocoding: " line per line of its text.
func report(w io.Writer, err error) {
	for line := range strings.Lines(err.Error()) {
		fmt.Fprintf(w, "geocoding: %s", line)
		if !strings.HasSuffix(line, "\n") {
			fmt.Fprintln(w)
		}
	}
}
