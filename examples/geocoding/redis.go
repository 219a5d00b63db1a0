package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is where Redis is, for -store redis: the flags of its three
// topologies (-redis-url, -redis-sentinel, -redis-cluster), the go-redis
// client of each, and the words for why the start-up ping failed.

// redisFlags are the flags that say where Redis is. At most one of them
// may be given on the command line; the default of -redis-url is none.
var redisFlags = []string{"redis-url", "redis-sentinel", "redis-cluster"}

// The forms of the flags' values, as their errors name them.
const (
	redisURLForm      = "redis://[:PASSWORD@]HOST:PORT/DB, rediss://[:PASSWORD@]HOST:PORT/DB (TLS) or unix:///PATH?db=DB"
	redisSentinelForm = "MASTER@HOST:PORT[,HOST:PORT...], such as mymaster@127.0.0.1:26379,127.0.0.1:26380"
	redisClusterForm  = "HOST:PORT[,HOST:PORT...], such as 127.0.0.1:7000,127.0.0.1:7001"
)

// givenFlags returns those of names that were set on fs's command line
// (flag.Visit), in fs's order.
func givenFlags(fs *flag.FlagSet, names []string) []string {
	var given []string
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(names, f.Name) {
			given = append(given, f.Name)
		}
	})
	return given
}

// checkRedisFlags reports, one error each, the Redis flags of c that are
// invalid: two of redisFlags given, a value that does not parse, and
// -redis-sentinel or -redis-cluster without -store redis.
func (c *config) checkRedisFlags() []error {
	given := slices.Clone(c.redisGiven)
	for _, f := range []struct{ name, value string }{{"redis-sentinel", c.redisSentinel}, {"redis-cluster", c.redisCluster}} {
		if f.value != "" && !slices.Contains(given, f.name) {
			given = append(given, f.name) // set by a test, not on a command line
		}
	}
	var errs []error
	if len(given) > 1 {
		names := "-" + strings.Join(given[:len(given)-1], ", -") + " and -" + given[len(given)-1]
		errs = append(errs, fmt.Errorf("%s: give one of -redis-url, -redis-sentinel and -redis-cluster, not %d", names, len(given)))
	}
	if c.store == "redis" || slices.Contains(given, "redis-url") {
		if _, err := parseRedisURL(c.redisURL); err != nil {
			errs = append(errs, err)
		}
	}
	if slices.Contains(given, "redis-sentinel") {
		if _, _, err := parseSentinel(c.redisSentinel); err != nil {
			errs = append(errs, err)
		} else if c.store != "redis" {
			errs = append(errs, fmt.Errorf("-redis-sentinel %s: needs -store redis", c.redisSentinel))
		}
	}
	if slices.Contains(given, "redis-cluster") {
		if _, err := parseCluster(c.redisCluster); err != nil {
			errs = append(errs, err)
		} else if c.store != "redis" {
			errs = append(errs, fmt.Errorf("-redis-cluster %s: needs -store redis", c.redisCluster))
		}
	}
	return errs
}

// parseRedisURL returns the client options of the -redis-url value u, or
// an error naming the form it wants and the value, its password masked.
func parseRedisURL(u string) (*redis.Options, error) {
	opts, err := redis.ParseURL(u)
	if err == nil {
		return opts, nil
	}
	shown := redactURL(u)
	var cause string
	var urlErr *url.Error
	switch parsed, perr := url.Parse(u); {
	case !strings.Contains(u, "://"):
		cause = "no scheme"
		if _, _, err := net.SplitHostPort(u); err == nil && !strings.ContainsAny(u, "@/") {
			cause += "; for the server at " + u + ", redis://" + u + "/0"
		}
	case errors.As(err, &urlErr):
		cause = urlErr.Err.Error()
	case perr == nil && parsed.Scheme != "redis" && parsed.Scheme != "rediss" && parsed.Scheme != "unix":
		cause = fmt.Sprintf("unknown scheme %q", parsed.Scheme)
	default:
		cause = strings.TrimPrefix(err.Error(), "redis: ")
	}
	return nil, fmt.Errorf("-redis-url %s: want %s: %s", shown, redisURLForm, cause)
}

// redactURL returns u with its password, if any, masked, even when u does
// not parse.
func redactURL(u string) string {
	if parsed, err := url.Parse(u); err == nil {
		return parsed.Redacted()
	}
	at := strings.LastIndex(u, "@")
	if at < 0 {
		return u
	}
	start := 0
	if i := strings.Index(u, "://"); i >= 0 && i < at {
		start = i + len("://")
	}
	return u[:start] + "xxxxx" + u[at:]
}

// parseSentinel returns the master's name and the Sentinels' addresses of
// the -redis-sentinel value v, or an error naming the form and the value.
func parseSentinel(v string) (master string, addrs []string, err error) {
	master, list, ok := strings.Cut(v, "@")
	switch {
	case !ok:
		err = errors.New("no @ between the master's name and the Sentinels' addresses")
	case master == "":
		err = errors.New("no master name before @")
	default:
		addrs, err = parseAddrs(list)
	}
	if err != nil {
		return "", nil, fmt.Errorf("-redis-sentinel %s: want %s: %w", v, redisSentinelForm, err)
	}
	return master, addrs, nil
}

// parseCluster returns the seed nodes' addresses of the -redis-cluster
// value v, or an error naming the form and the value.
func parseCluster(v string) ([]string, error) {
	addrs, err := parseAddrs(v)
	if err != nil {
		return nil, fmt.Errorf("-redis-cluster %s: want %s: %w", v, redisClusterForm, err)
	}
	return addrs, nil
}

// parseAddrs returns the addresses of list, HOST:PORT separated by commas,
// or an error naming the first that is not one.
func parseAddrs(list string) ([]string, error) {
	var addrs []string
	for a := range strings.SplitSeq(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return nil, errors.New("an empty address")
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("%q is no HOST:PORT", a)
		}
		if host == "" {
			return nil, fmt.Errorf("%q has no host", a)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%q: want a port from 1 to 65535", a)
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// newRedisClient returns the go-redis client of cfg's Redis: a failover
// client of -redis-sentinel, a cluster client of -redis-cluster, else a
// client of -redis-url, each with the deadlines of redisOptions. cfg must
// have passed check.
func newRedisClient(cfg config) (redis.UniversalClient, error) {
	if cfg.redisSentinel == "" && cfg.redisCluster == "" {
		opts, err := redisOptions(cfg.redisURL)
		if err != nil {
			return nil, err
		}
		return redis.NewClient(opts), nil
	}
	t := redisClientTimeout
	u := &redis.UniversalOptions{ContextTimeoutEnabled: true, DialTimeout: t, DialerRetries: 1,
		ReadTimeout: t, WriteTimeout: t, PoolTimeout: t, MaxRetries: -1}
	var err error
	if cfg.redisSentinel != "" {
		if u.MasterName, u.Addrs, err = parseSentinel(cfg.redisSentinel); err != nil {
			return nil, err
		}
		return redis.NewFailoverClient(u.Failover()), nil
	}
	if u.Addrs, err = parseCluster(cfg.redisCluster); err != nil {
		return nil, err
	}
	return redis.NewClusterClient(u.Cluster()), nil
}

// redisAttrs returns the log attributes that say where cfg's Redis is:
// the Sentinels and the master's name, the cluster's seed nodes, or the
// server's address and database, never a password.
func redisAttrs(cfg config) []any {
	switch {
	case cfg.redisSentinel != "":
		return []any{"redis-sentinel", cfg.redisSentinel}
	case cfg.redisCluster != "":
		return []any{"redis-cluster", cfg.redisCluster}
	}
	opts, err := redis.ParseURL(cfg.redisURL)
	if err != nil { // check has reported it
		return nil
	}
	return []any{"redis", opts.Addr, "db", opts.DB}
}

// probeTimeout bounds each probe of redisCause.
const probeTimeout = 500 * time.Millisecond

// redisCause returns, in words, the cause of err, the failure of the
// start-up ping of cfg's Redis, or "" when err says it plainly. For
// -redis-url over TCP, when the server's answer (or silence) does not
// tell, it asks the server in the other protocol: a server that answers
// plain Redis to a rediss:// URL, or speaks TLS to a redis:// one, is
// named so, with the scheme to use.
func redisCause(ctx context.Context, cfg config, err error) string {
	var addr string
	var useTLS bool
	if cfg.redisSentinel == "" && cfg.redisCluster == "" {
		if opts, perr := redis.ParseURL(cfg.redisURL); perr == nil && opts.Network == "tcp" {
			addr, useTLS = opts.Addr, opts.TLSConfig != nil
		}
	}
	var record tls.RecordHeaderError
	var dnsErr *net.DNSError
	var reply redis.Error
	switch {
	case useTLS && errors.As(err, &record):
		return "the server at " + addr + " does not speak TLS, which rediss:// asks for: use redis://"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing listens at that address"
	case errors.As(err, &dnsErr):
		return "unknown host " + dnsErr.Name
	case errors.As(err, &reply):
		switch msg := reply.Error(); {
		case strings.HasPrefix(msg, "NOAUTH"):
			return "Redis wants a password: redis://:PASSWORD@HOST:PORT/DB"
		case strings.HasPrefix(msg, "WRONGPASS"):
			return "the user name or password is wrong"
		}
		return ""
	}
	if addr != "" {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		switch {
		case useTLS && speaksPlainRedis(pctx, addr):
			return "the server at " + addr + " answers plain Redis, not TLS, which rediss:// asks for: use redis://"
		case !useTLS && speaksTLS(pctx, addr):
			return "the server at " + addr + " speaks TLS: use rediss://"
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ETIMEDOUT) {
		return "no answer in time: a paused or overloaded server, or a network that drops packets"
	}
	return ""
}

// speaksPlainRedis reports whether the server at addr answers an inline
// PING in plain RESP: "+PONG", or an error such as "-NOAUTH".
func speaksPlainRedis(ctx context.Context, addr string) bool {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	b, err := bufio.NewReader(conn).ReadByte()
	return err == nil && (b == '+' || b == '-')
}

// speaksTLS reports whether the server at addr completes a TLS handshake,
// or refuses it with a TLS alert (one that wants a client certificate
// does). It verifies no certificate: it only asks which protocol the
// server speaks, and sends nothing else.
func speaksTLS(ctx context.Context, addr string) bool {
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}} //nolint:gosec // a probe of the protocol, no data
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		conn.Close()
		return true
	}
	var remote *net.OpError // a TLS alert from the server
	return errors.As(err, &remote) && remote.Op == "remote error"
}
