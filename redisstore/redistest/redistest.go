// Package redistest starts real redis-server processes on loopback for
// tests, so that they can be killed, paused and restarted, and never
// touches a Redis it did not start. redis-server (and redis-cli, for
// clusters) must be on the PATH: ./scripts/test installs them.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process started by a test.
type Server struct {
	t    testing.TB
	Addr string // host:port on 127.0.0.1
	dir  string
	args []string
	conf string // a config file, passed before the options (a Sentinel's)
	cmd  *exec.Cmd
}

// Start starts a redis-server on a free loopback port, with persistence off,
// and stops it when the test ends. Extra arguments are passed to the server.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redistest: redis-server is not installed (./scripts/test installs it)")
	}
	s := &Server{t: t, Addr: "127.0.0.1:" + strconv.Itoa(freePort(t)), dir: t.TempDir(), args: args}
	s.start()
	t.Cleanup(s.Kill)
	return s
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (s *Server) start() {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	args := append([]string{"--port", port, "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--loglevel", "warning"}, s.args...)
	if s.conf != "" {
		args = append([]string{s.conf}, args...)
	}
	s.cmd = exec.Command("redis-server", args...)
	s.cmd.Stdout, s.cmd.Stderr = nil, nil
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		var reply redis.Error // such as NOAUTH: the server is up
		if err == nil || errors.As(err, &reply) {
			return
		}
		if time.Now().After(deadline) {
			s.Kill() // Fatalf ends the test before a caller registers the cleanup
			s.t.Fatalf("redistest: redis-server on %s did not answer: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client returns a client of the server with ContextTimeoutEnabled and
// short timeouts, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:                  s.Addr,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		MaxRetries:            -1,
	})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// Kill stops the server at once (SIGKILL) and waits for it to exit. It is
// safe to call on a stopped server.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGCONT)
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Pause freezes the server (SIGSTOP): connections stay open and nothing
// answers, like a hung server.
func (s *Server) Pause() { s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume undoes Pause.
func (s *Server) Resume() { s.cmd.Process.Signal(syscall.SIGCONT) }

// Restart kills the server and starts it again on the same port, empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.start()
}

// StartCluster starts n servers in cluster mode, joins them into one
// cluster with no replicas, waits until it serves every slot, and returns
// a cluster client (ContextTimeoutEnabled) closed when the test ends.
func StartCluster(t testing.TB, n int) (*redis.ClusterClient, []*Server) {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatal("redistest: redis-cli is not installed (./scripts/test installs it)")
	}
	var servers []*Server
	var addrs []string
	for i := range n {
		dir := t.TempDir()
		s := Start(t, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", i)))
		servers = append(servers, s)
		addrs = append(addrs, s.Addr)
	}
	args := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	// Every node must see the cluster as up before it serves its slots.
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range servers {
		node := redis.NewClient(&redis.Options{Addr: s.Addr})
		for {
			info, err := node.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				node.Close()
				t.Fatalf("redistest: node %s did not see the cluster up: %v %q", s.Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		node.Close()
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c, servers
}

// Commands returns how many commands the server of c has run (INFO
// commandstats: the commands that scripts run count too, INFO itself does
// not), or, given names such as "evalsha", how many of those.
func Commands(tb testing.TB, c *redis.Client, names ...string) int64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for line := range strings.SplitSeq(info, "\n") {
		// cmdstat_evalsha:calls=12,usec=...
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		name, isCommand := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCommand || name == "info" || len(names) > 0 && !slices.Contains(names, name) {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			tb.Fatalf("redistest: INFO commandstats line %q: %v", line, err)
		}
		n += v
	}
	return n
}

// RoundTrips is a go-redis hook that counts a client's round trips to
// Redis: each command sent alone, and each pipeline (client.AddHook).
type RoundTrips struct{ N atomic.Int64 }

// DialHook implements [redis.Hook]: it counts nothing.
func (r *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements [redis.Hook]: a command sent alone is a round trip.
func (r *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.N.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements [redis.Hook]: a pipeline is a round trip.
func (r *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.N.Add(1)
		return next(ctx, cmds)
	}
}
