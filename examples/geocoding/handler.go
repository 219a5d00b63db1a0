package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/failover"
	"github.com/tokenfair/ratelimit/grpclimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/metrics"
	"github.com/tokenfair/ratelimit/redisstore"
)

// apiKeyHeader is the request header field that carries the API key.
const apiKeyHeader = "X-API-Key"

// servers are what the demo serves, over one set of limiters and one key
// function: the HTTP handler and, with -grpc-addr, the gRPC server.
type servers struct {
	http http.Handler
	grpc *grpc.Server // nil without -grpc-addr
	// close releases what they hold: the stores, the Redis client, the
	// -plans watcher and the -otlp export (after its last push); it stops
	// the gRPC server too, at once.
	close func()
}

// newHandler returns the HTTP handler of newServers(cfg) and the function
// that releases what it holds.
func newHandler(cfg config) (http.Handler, func(), error) {
	s, err := newServers(cfg)
	if err != nil {
		return nil, nil, err
	}
	return s.http, s.close, nil
}

// newServers returns the server's HTTP handler and, with -grpc-addr, its
// gRPC server. /healthz and /metrics are answered before the limiter;
// every other request, RPC and stream message goes through it: the RPCs,
// over HTTP (Connect, gRPC, gRPC-Web) or gRPC, are decided by Middlewares
// of their own with the options, limiters and key of /geocode, so that a
// client has one quota everywhere, but answered in the caller's protocol.
// cfg must have passed check; newServers reports invalid rates, bursts,
// trusted proxies and address lists, naming the flag, and an invalid
// -plans file, naming its line.
func newServers(cfg config) (servers, error) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		return servers{}, err
	}
	ot, err := newOTLP(cfg)
	if err != nil {
		return servers{}, err
	}
	// The library's warnings go to the server's log (slog.Default) and are
	// counted in ratelimit_warnings_total.
	logger := m.Logger(cfg.logHandler)
	// The trusted proxies are validated even with -key api-key, which uses
	// them only for -block and -safe, so that a typo never goes unnoticed.
	// (-block and -safe do not use the IPv6 prefix.)
	clientIP := &ratelimit.IPOptions{TrustedProxies: strings.Split(cfg.trustedProxies, ","), IPv6Prefix: cfg.ipv6Prefix, Logger: logger}
	byIP, err := ratelimit.KeyByIP(clientIP)
	if err != nil {
		return servers{}, fmt.Errorf("-trusted-proxies: %w", err)
	}
	var key ratelimit.KeyFunc
	switch cfg.key {
	case "api-key":
		key = ratelimit.KeyByAPIKey(apiKeyHeader)
	case "ip":
		key = byIP
	default:
		return servers{}, fmt.Errorf("-key %s: want api-key or ip", cfg.key)
	}

	store, closeStore, err := newStore(cfg, m, ot)
	if err != nil {
		ot.close()
		return servers{}, err
	}
	cleanup := func() { closeStore(); ot.close() }
	var plans *planTable
	if cfg.plans != "" {
		plans = new(planTable)
	}
	ls, err := newLimiters(cfg, store, key, plans)
	if err != nil {
		cleanup()
		return servers{}, err
	}
	if plans != nil {
		reader := &planReader{path: cfg.plans, def: ls.defaults(cfg), check: ls.checkRate}
		stop, err := watchPlans(reader, plans, cfg.planPoll, logger)
		if err != nil {
			cleanup()
			return servers{}, err
		}
		release := cleanup
		cleanup = func() { stop(); release() }
	}
	opts := &ratelimit.MiddlewareOptions{Headers: cfg.headers, Observe: ot.observe(m.Observe), Logger: logger, MaxInFlight: cfg.maxInflight,
		MaxInFlightTotal: cfg.maxInflightAll, MaxQueued: cfg.maxQueued,
		Block: strings.Split(cfg.block, ","), Safe: strings.Split(cfg.safe, ","), ClientIP: clientIP,
		Cost: batchCost, ResultInContext: true, Clock: cfg.clock}
	if plans != nil {
		opts.LimiterFor = ls.pick
	}
	if prefix := cfg.skipPath; prefix != "" {
		opts.Skip = func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, prefix) }
	}
	switch cfg.count {
	case "failed":
		opts.CountIf = func(status int) bool { return status >= 400 }
	case "successful":
		opts.CountIf = func(status int) bool { return status < 400 }
	}
	mw, err := ratelimit.NewMiddleware(ls.own(), key, opts)
	if err != nil { // after check, only -block and -safe can be wrong
		cleanup()
		return servers{}, fmt.Errorf("-block, -safe: %w", err)
	}

	// The Connect route's Middleware answers in the caller's protocol.
	rpcOpts := *opts
	rpcOpts.OnDeny, rpcOpts.OnError = grpclimit.OnDeny, grpclimit.OnError
	rpcMW, err := ratelimit.NewMiddleware(ls.own(), key, &rpcOpts)
	if err != nil {
		cleanup()
		return servers{}, fmt.Errorf("-block, -safe: %w", err)
	}

	rpc := rpcRoute{mw: rpcMW, h: newConnectHandler()}
	router, err := newRouter(cfg.framework, mw, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), geocodeBatch(logger), rpc)
	if err != nil {
		cleanup()
		return servers{}, err
	}
	guard, err := newAdminGuard(cfg.clock, byIP, logger)
	if err != nil {
		cleanup()
		return servers{}, err
	}
	if router, err = withAdmin(router, cfg.adminToken, ls.all(), cfg.key, key, guard, logger); err != nil {
		cleanup()
		return servers{}, err
	}
	s := servers{http: withBatches(router), close: cleanup}
	if cfg.grpcAddr != "" {
		gs, err := newGRPCServer(ls.own(), key, *opts)
		if err != nil {
			cleanup()
			return servers{}, err
		}
		s.grpc, s.close = gs, func() { gs.Stop(); cleanup() }
	}
	return s, nil
}

// limitFlags returns the flags that set the limits and the penalty box,
// for error messages.
func limitFlags(cfg config) string {
	flags := fmt.Sprintf("-rate %s -burst %d", formatFloat(cfg.rate), cfg.burst)
	if cfg.globalRate > 0 {
		flags += fmt.Sprintf(" -global-rate %s -global-burst %d", formatFloat(cfg.globalRate), cfg.globalBurst)
	}
	if cfg.banAfter > 0 {
		flags += fmt.Sprintf(" -ban-after %d -ban-within %v -ban-for %v", cfg.banAfter, cfg.banWithin, cfg.banFor)
		if cfg.dryRun {
			flags += " -dry-run"
		}
	}
	return flags
}

// newStore returns the store that -store names and a function that
// releases it. With -store redis, the shared store is wrapped in a
// failover.Store that applies -on-store-error; the memory store cannot
// fail. The store's health and keys are exported through m, and its
// health through ot too.
func newStore(cfg config, m *metrics.Metrics, ot *otlpExport) (ratelimit.Store, func(), error) {
	local, err := memorystore.New(&memorystore.Options{Clock: cfg.clock})
	if err != nil {
		return nil, nil, err
	}
	if err := m.TrackKeys("memory", local.Len); err != nil {
		return nil, nil, err
	}
	if cfg.store == "memory" {
		return local, func() {}, nil
	}
	client, err := newRedisClient(cfg)
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() {
		client.Close()
	}
	shared, err := redisstore.New(client, &redisstore.Options{Prefix: "geocoding:", Timeout: redisTimeout, Clock: cfg.clock, NoRefusalCache: !cfg.refusalCache, Lease: cfg.lease})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	store, err := failover.New(shared, &failover.Options{
		Mode: cfg.onStoreError, Local: local, Instances: int64(cfg.instances),
		OnError: ot.onError(m.OnError), OnHealthChange: ot.onHealthChange(m.OnHealthChange),
	})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return store, cleanup, nil
}

// redisOptions returns the client options of -redis-url (newRedisClient
// gives the clients of -redis-sentinel and -redis-cluster the same
// deadlines). Deadlines must cut socket reads short, and a dead Redis must
// cost little: a paused server costs one call's deadline, a refused
// connection fails at once (one dial, no retries), then the failover stops
// asking it until a probe succeeds.
func redisOptions(url string) (*redis.Options, error) {
	opts, err := parseRedisURL(url)
	if err != nil {
		return nil, err
	}
	opts.ContextTimeoutEnabled = true
	opts.DialTimeout = redisClientTimeout
	opts.DialerRetries = 1
	opts.ReadTimeout = redisClientTimeout
	opts.WriteTimeout = redisClientTimeout
	opts.PoolTimeout = redisClientTimeout
	opts.MaxRetries = -1
	return opts, nil
}

// redisTimeout is the deadline of each call of the Redis store, and
// redisClientTimeout the client's dial, read, write and pool timeouts, a
// little longer. The tests raise both, since a loaded test machine may
// answer slower than a production Redis must.
var redisTimeout, redisClientTimeout = 100 * time.Millisecond, 250 * time.Millisecond

// pingTimeout bounds the start-up check of Redis.
const pingTimeout = time.Second

// storeAttrs returns the log attributes that name the store of cfg: the
// kind and, for Redis, where it is (redisAttrs), never its password.
func storeAttrs(cfg config) []any {
	if cfg.store != "redis" {
		return []any{"store", cfg.store}
	}
	attrs := append(append([]any{"store", cfg.store}, redisAttrs(cfg)...), "refusal-cache", cfg.refusalCache)
	if cfg.lease > 0 {
		attrs = append(attrs, "lease", cfg.lease)
	}
	return attrs
}

// pingRedis checks once, with -store redis, that Redis answers, and logs
// where it is and, if it does not, why: the cause in words (redisCause),
// when the error alone does not say it, and the error. The server starts
// either way: while Redis is unavailable, -on-store-error decides.
func pingRedis(ctx context.Context, cfg config, logger *slog.Logger) {
	if cfg.store != "redis" {
		return
	}
	client, err := newRedisClient(cfg)
	if err != nil { // newHandler has reported it
		return
	}
	defer client.Close()
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		attrs := redisAttrs(cfg)
		if cause := redisCause(ctx, cfg, err); cause != "" {
			attrs = append(attrs, "cause", cause)
		}
		logger.Warn("geocoding: Redis is unreachable; serving with -on-store-error "+cfg.onStoreError.String()+" until it answers",
			append(attrs, "err", err)...)
	}
}

// warnUnprotected warns, with -store redis and -on-store-error open, that
// an outage of Redis leaves the API without a limit.
func warnUnprotected(cfg config, logger *slog.Logger) {
	if cfg.store == "redis" && cfg.onStoreError == failover.Open {
		logger.Warn("geocoding: -on-store-error open: while Redis is unavailable every request is served without a limit; " +
			"-on-store-error local keeps each instance to its share of the limits, closed refuses with 503")
	}
}

// geocodeResult is the body of a successful GET /geocode.
type geocodeResult struct {
	Query string  `json:"query"`
	Name  string  `json:"name"`
	Lat   float64 `json:"lat"`
	Lon   float64 `json:"lon"`
}

// geocode answers GET /geocode?q=NAME with the coordinates of the place.
func geocode(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query().Get("q")
	if strings.TrimSpace(q) == "" {
		writeProblem(w, http.StatusBadRequest, "missing query parameter q")
		return
	}
	p, ok := lookup(q)
	if !ok {
		writeProblem(w, http.StatusNotFound, "unknown place")
		return
	}
	writeJSON(w, http.StatusOK, "application/json", geocodeResult{Query: q, Name: p.Name, Lat: p.Lat, Lon: p.Lon})
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write([]byte("ok\n"))
}

func methodNotAllowed(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Allow", "GET, HEAD")
	writeProblem(w, http.StatusMethodNotAllowed, "only GET and HEAD are allowed")
}

func notFound(w http.ResponseWriter, _ *http.Request) {
	writeProblem(w, http.StatusNotFound, "no such endpoint; try GET /geocode?q=paris")
}

// problem is an RFC 9457 problem body, as the limiter writes for 401 and 429.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

func writeProblem(w http.ResponseWriter, status int, detail string) {
	writeJSON(w, status, "application/problem+json",
		problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
}

func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil { // cannot happen with the types above
		http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
		return
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}
