package redistest

// A Redis Cluster of three primaries, each with a replica.

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of three primaries with one replica each,
// started by StartClusterReplicas.
type Cluster struct {
	t      testing.TB
	Addrs  []string      // the seed addresses: every node's
	Shards []Shard       // as the cluster was created
	ask    *redis.Client // of Slot, made the first time
}

// Shard is a primary of a Cluster with its replica and its slots.
type Shard struct {
	ID      string // the primary's node ID
	Primary *Server
	Replica *Server
	Slots   [][2]int // ranges of slots, first and last included
}

// Has reports whether the shard served slot at start.
func (sh Shard) Has(slot int) bool {
	for _, r := range sh.Slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// clusterNodeTimeout is each node's cluster-node-timeout: a primary silent
// for that long is failed over by its replica.
const clusterNodeTimeout = 1000 * time.Millisecond

// StartClusterReplicas starts six nodes in cluster mode
// (cluster-node-timeout 1000 ms, and args, if any) and joins them into a
// cluster of three primaries, each with one replica (redis-cli --cluster
// create --cluster-replicas 1). It waits until every node sees the
// cluster up and every replica is in sync, and returns a cluster client
// (ContextTimeoutEnabled) and the topology; every process is killed, and
// every client closed, when the test ends.
func StartClusterReplicas(t testing.TB, args ...string) (*redis.ClusterClient, *Cluster) {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatal("redistest: redis-cli is not installed (./scripts/test installs it)")
	}
	c := &Cluster{t: t}
	byAddr := make(map[string]*Server)
	for i := range 6 {
		dir := t.TempDir()
		s := Start(t, append([]string{"--cluster-enabled", "yes", noSyncDelay[0], noSyncDelay[1],
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", i)),
			"--cluster-node-timeout", strconv.FormatInt(clusterNodeTimeout.Milliseconds(), 10)}, args...)...)
		byAddr[s.Addr] = s
		c.Addrs = append(c.Addrs, s.Addr)
	}
	cmd := append(append([]string{"--cluster", "create"}, c.Addrs...), "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", cmd...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}

	deadline := time.Now().Add(20 * time.Second)
	for _, addr := range c.Addrs {
		node := redis.NewClient(&redis.Options{Addr: addr})
		for {
			info, err := node.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				node.Close()
				t.Fatalf("redistest: node %s did not see the cluster up: %v %q", addr, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
		node.Close()
	}

	// Every node must know every replica as one (redis-cli made them
	// replicas one node at a time, and the others learn it by gossip), or
	// a failover may start with a node that still takes the replica for a
	// primary.
	var nodes []clusterNode
	for _, addr := range c.Addrs {
		for {
			nodes = clusterNodes(t, addr)
			n := 0
			for _, node := range nodes {
				if node.master != "" {
					n++
				}
			}
			if n == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: node %s knows %d replicas, want 3: %+v", addr, n, nodes)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	ids := make(map[string]clusterNode)
	for _, n := range nodes {
		ids[n.id] = n
	}
	for _, n := range nodes {
		if n.master == "" {
			continue
		}
		p := ids[n.master]
		sh := Shard{ID: p.id, Primary: byAddr[p.addr], Replica: byAddr[n.addr], Slots: p.slots}
		if sh.Primary == nil || sh.Replica == nil || len(sh.Slots) == 0 {
			t.Fatalf("redistest: CLUSTER NODES names nodes not started, or a primary without slots: %+v", nodes)
		}
		WaitReplica(t, sh.Replica, sh.Primary.Addr)
		c.Shards = append(c.Shards, sh)
	}
	slices.SortFunc(c.Shards, func(a, b Shard) int { return a.Slots[0][0] - b.Slots[0][0] })
	return c.Client(), c
}

// Client returns a new cluster client (ContextTimeoutEnabled), closed when
// the test ends: one per instance of a service.
func (c *Cluster) Client() *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, ContextTimeoutEnabled: true, DialTimeout: time.Second})
	c.t.Cleanup(func() { cc.Close() })
	return cc
}

// ShardOf returns the index in Shards of the shard that served slot at
// start.
func (c *Cluster) ShardOf(slot int) int {
	for i, sh := range c.Shards {
		if sh.Has(slot) {
			return i
		}
	}
	return -1
}

// Slot returns the slot of key, as the cluster computes it (CLUSTER
// KEYSLOT: CRC16 of the key, or of its hash tag, modulo 16384).
func (c *Cluster) Slot(key string) int {
	c.t.Helper()
	if c.ask == nil {
		c.ask = redis.NewClient(&redis.Options{Addr: c.Addrs[0], MaxRetries: -1})
		c.t.Cleanup(func() { c.ask.Close() })
	}
	slot, err := c.ask.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		c.t.Fatalf("redistest: CLUSTER KEYSLOT %q: %v", key, err)
	}
	return int(slot)
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr string
	master   string // the primary's ID, for a replica; "" for a primary
	slots    [][2]int
}

func clusterNodes(t testing.TB, addr string) []clusterNode {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	text, err := c.ClusterNodes(context.Background()).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER NODES on %s: %v", addr, err)
	}
	var nodes []clusterNode
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		// <id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		n := clusterNode{id: f[0], addr: strings.SplitN(f[1], "@", 2)[0]}
		if f[3] != "-" {
			n.master = f[3]
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue // a slot being migrated
			}
			first, last, found := strings.Cut(s, "-")
			if !found {
				last = first
			}
			a, err1 := strconv.Atoi(first)
			b, err2 := strconv.Atoi(last)
			if err1 != nil || err2 != nil {
				t.Fatalf("redistest: CLUSTER NODES slot %q: %v %v", s, err1, err2)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		nodes = append(nodes, n)
	}
	return nodes
}
