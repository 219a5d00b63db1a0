package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is a primary with two replicas watched by three Sentinels, all
// on loopback, started by StartSentinel.
type Sentinel struct {
	t         testing.TB
	Master    string    // the name the Sentinels know the primary by
	Addrs     []string  // the Sentinels' addresses
	Primary   *Server   // the primary at start
	Replicas  []*Server // its two replicas at start
	Sentinels []*Server // the three Sentinels
}

// sentinelDownAfter is how long the Sentinels wait for a silent primary
// before they agree that it is down and fail over. Not less: a Sentinel
// that has had no PONG from a primary it just switched to within that
// time takes it for down too (with the other Sentinels' votes on the
// last one), and on a loaded machine fails over again at once.
const sentinelDownAfter = 2 * time.Second

// sentinelFailoverTimeout is the Sentinels' failover-timeout: a failover
// that stalls (no Sentinel elected leader, no replica fit to promote yet)
// is tried again twice that long after it started, so that a short one
// keeps such a retry well within a test's patience.
const sentinelFailoverTimeout = 3000 * time.Millisecond

// noSyncDelay makes a primary start a full sync at once, rather than wait
// 5 s for more replicas to share it (repl-diskless-sync-delay): any server
// of a topology may be a primary.
var noSyncDelay = []string{"--repl-diskless-sync-delay", "0"}

// StartSentinel starts a primary, two replicas of it and three Sentinels
// that know one another and the replicas from the start (a quorum of 2,
// down-after-milliseconds 2000, failover-timeout 3000), and waits until the
// replicas are in sync and every Sentinel sees the primary with two
// replicas and two other Sentinels. It returns a failover client of the
// primary (ContextTimeoutEnabled, short timeouts) and the topology; every
// process is killed, and every client closed, when the test ends.
func StartSentinel(t testing.TB) (*redis.Client, *Sentinel) {
	t.Helper()
	s := &Sentinel{t: t, Master: "primary"}
	s.Primary = Start(t, noSyncDelay...)
	host, port, _ := net.SplitHostPort(s.Primary.Addr)
	for range 2 {
		s.Replicas = append(s.Replicas, Start(t, append([]string{"--replicaof", host, port}, noSyncDelay...)...))
	}
	for _, r := range s.Replicas {
		WaitReplica(t, r, s.Primary.Addr)
	}

	// Each Sentinel is told the others' IDs and the replicas, as a
	// Sentinel's own rewritten configuration would be, so that none waits
	// for hello messages (every 2 s) or the primary's INFO (every 10 s).
	ids := make([]string, 3)
	ports := make([]int, 3)
	for i := range ids {
		var b [20]byte
		rand.Read(b[:])
		ids[i], ports[i] = hex.EncodeToString(b[:]), freePort(t)
		s.Addrs = append(s.Addrs, "127.0.0.1:"+strconv.Itoa(ports[i]))
	}
	for i := range ids {
		var conf strings.Builder
		fmt.Fprintf(&conf, "sentinel myid %s\n", ids[i])
		fmt.Fprintf(&conf, "sentinel monitor %s %s %s 2\n", s.Master, host, port)
		fmt.Fprintf(&conf, "sentinel down-after-milliseconds %s %d\n", s.Master, sentinelDownAfter.Milliseconds())
		fmt.Fprintf(&conf, "sentinel failover-timeout %s %d\n", s.Master, sentinelFailoverTimeout.Milliseconds())
		for _, r := range s.Replicas {
			rh, rp, _ := net.SplitHostPort(r.Addr)
			fmt.Fprintf(&conf, "sentinel known-replica %s %s %s\n", s.Master, rh, rp)
		}
		for j := range ids {
			if j != i {
				fmt.Fprintf(&conf, "sentinel known-sentinel %s 127.0.0.1 %d %s\n", s.Master, ports[j], ids[j])
			}
		}
		dir := t.TempDir()
		file := filepath.Join(dir, "sentinel.conf") // Sentinel rewrites it: absolute and writable
		if err := os.WriteFile(file, []byte(conf.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		logFile := filepath.Join(dir, "sentinel.log")
		srv := &Server{t: t, Addr: s.Addrs[i], dir: dir, conf: file, args: []string{"--sentinel", "--loglevel", "notice", "--logfile", logFile}}
		srv.start()
		t.Cleanup(srv.Kill)
		t.Cleanup(func() { logEvents(t, srv.Addr, logFile) })
		s.Sentinels = append(s.Sentinels, srv)
	}

	deadline := time.Now().Add(20 * time.Second)
	for _, addr := range s.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
		for {
			m, err := sc.Master(context.Background(), s.Master).Result()
			if err == nil && m["flags"] == "master" && m["num-slaves"] == "2" && m["num-other-sentinels"] == "2" {
				break
			}
			if time.Now().After(deadline) {
				sc.Close()
				t.Fatalf("redistest: Sentinel %s does not see the topology: %v %v", addr, err, m)
			}
			time.Sleep(20 * time.Millisecond)
		}
		sc.Close()
	}
	return s.Client(), s
}

// logEvents logs, if t failed, the events that the Sentinel at addr wrote
// to its log file (+sdown, +switch-master, -failover-abort-no-good-slave…),
// which tell why a failover took long or never came.
func logEvents(t testing.TB, addr, file string) {
	if !t.Failed() {
		return
	}
	text, err := os.ReadFile(file)
	if err != nil {
		t.Logf("redistest: the log of Sentinel %s: %v", addr, err)
		return
	}
	var events strings.Builder
	for line := range strings.SplitSeq(string(text), "\n") {
		if strings.Contains(line, " +") || strings.Contains(line, " -") {
			events.WriteString(line + "\n")
		}
	}
	t.Logf("redistest: the events of Sentinel %s:\n%s", addr, events.String())
}

// Client returns a new failover client of the primary (ContextTimeoutEnabled,
// short timeouts, no retries), closed when the test ends: one per instance
// of a service.
func (s *Sentinel) Client() *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            s.Master,
		SentinelAddrs:         s.Addrs,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		MaxRetries:            -1,
	})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// MasterAddr returns the primary's address as the first Sentinel that
// answers names it (SENTINEL get-master-addr-by-name).
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	var err error
	for _, addr := range s.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
		var hp []string
		hp, err = sc.GetMasterAddrByName(ctx, s.Master).Result()
		sc.Close()
		if err == nil && len(hp) == 2 {
			return net.JoinHostPort(hp[0], hp[1]), nil
		}
	}
	return "", fmt.Errorf("redistest: no Sentinel names the primary: %v", err)
}

// Switched returns the primary's address if a Sentinel names another
// primary than from (the first that answers within ctx and does), else
// "". Sentinels learn a switch from one another within a second or two:
// the first to name the new primary tells when clients can learn it.
func (s *Sentinel) Switched(ctx context.Context, from string) string {
	for _, addr := range s.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
		hp, err := sc.GetMasterAddrByName(ctx, s.Master).Result()
		sc.Close()
		if err == nil && len(hp) == 2 {
			if a := net.JoinHostPort(hp[0], hp[1]); a != from {
				return a
			}
		}
	}
	return ""
}

// Server returns the primary or replica started at addr, or nil.
func (s *Sentinel) Server(addr string) *Server {
	for _, srv := range append([]*Server{s.Primary}, s.Replicas...) {
		if srv.Addr == addr {
			return srv
		}
	}
	return nil
}

// RestartAsReplica kills the server and starts it again on the same port,
// empty, as a replica of primary (host:port), as an orchestrator brings a
// failed primary back after a failover.
func (s *Server) RestartAsReplica(primary string) {
	s.t.Helper()
	host, port, _ := net.SplitHostPort(primary)
	var args []string
	for i := 0; i < len(s.args); i++ {
		if s.args[i] == "--replicaof" {
			i += 2 // with its host and port
			continue
		}
		args = append(args, s.args[i])
	}
	s.args = append(args, "--replicaof", host, port)
	s.Restart()
}

// WaitReplica waits (up to 20 s) until the server r is a replica of primary
// in sync with it (INFO replication: master_link_status:up).
func WaitReplica(t testing.TB, r *Server, primary string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	defer c.Close()
	host, port, _ := net.SplitHostPort(primary)
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_host:"+host+"\r") &&
			strings.Contains(info, "master_port:"+port+"\r") && strings.Contains(info, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %s is no replica of %s in sync: %v %q", r.Addr, primary, err, info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Role returns the server's role as ROLE says ("master", "slave",
// "sentinel"), or "" if it does not answer within 200 ms.
func (s *Server) Role() string {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	v, err := c.Do(ctx, "role").Slice()
	if err != nil || len(v) == 0 {
		return ""
	}
	role, _ := v[0].(string)
	return role
}

// CutReplicas makes s, a primary, stop feeding its replicas: it closes
// their links (CLIENT KILL TYPE replica) and refuses their resync (its
// default user loses PSYNC and SYNC), so that every write it acknowledges
// from then on lives on it alone, as if its replicas had fallen behind for
// good. Its other clients, on the default user too, keep every other
// command. A restart undoes it. (Pausing the replicas would not do: the
// kernel keeps what the primary sends them in their sockets' buffers, and
// they apply it once they resume, even after the primary's death.) Kill
// the primary soon after: a replica cut off for long is not promoted (a
// Sentinel's, past ten times down-after-milliseconds; a Cluster's, past
// ten times cluster-node-timeout and 10 s).
func (s *Server) CutReplicas() {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	if err := c.Do(ctx, "acl", "setuser", "default", "-psync", "-sync").Err(); err != nil {
		s.t.Fatalf("redistest: ACL SETUSER on %s: %v", s.Addr, err)
	}
	if err := c.Do(ctx, "client", "kill", "type", "replica").Err(); err != nil {
		s.t.Fatalf("redistest: CLIENT KILL TYPE replica on %s: %v", s.Addr, err)
	}
	info, err := c.Info(ctx, "replication").Result()
	if err != nil || !strings.Contains(info, "connected_slaves:0\r") {
		s.t.Fatalf("redistest: %s still feeds replicas: %v %q", s.Addr, err, info)
	}
}

// WaitSynced waits (up to 20 s) until each of replicas has applied what s,
// their primary, has written so far (INFO replication: each replica's
// slave_repl_offset has reached the primary's master_repl_offset).
func (s *Server) WaitSynced(replicas ...*Server) {
	s.t.Helper()
	want := replOffset(s.t, s.Addr, "master_repl_offset")
	deadline := time.Now().Add(20 * time.Second)
	for _, r := range replicas {
		for replOffset(s.t, r.Addr, "slave_repl_offset") < want {
			if time.Now().After(deadline) {
				s.t.Fatalf("redistest: replica %s did not reach offset %d of %s", r.Addr, want, s.Addr)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// replOffset returns the field of INFO replication on the server at addr,
// a replication offset, or -1 if it has none.
func replOffset(t testing.TB, addr, field string) int64 {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	info, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		t.Fatalf("redistest: INFO replication on %s: %v", addr, err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("redistest: INFO replication on %s: %q: %v", addr, line, err)
			}
			return n
		}
	}
	return -1
}
