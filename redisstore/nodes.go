package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenfair/ratelimit"
)

// On a Redis Cluster the store keeps apart what one primary's failure
// would otherwise spread to the keys of the others: each primary has its
// own batcher, so that a round trip to a dead node holds none of the calls
// of a live one, and Part names the primary of a key, so that a
// failover.Store keeps each one's health apart.
//
// And the store follows a failover by itself. A ClusterClient reloads its
// slot map when a node answers MOVED, or when the map is older than
// ClusterOptions.ClusterStateReloadInterval (a minute by default): a dead
// primary answers nothing, so the calls of its keys would go on failing
// at its address for that long after a replica took its slots. A call
// that fails as it would with a stale map asks the client for the map
// again (see Store.reload).

// maxNodes bounds the batchers kept, one per primary address seen; the
// calls of a node past it share the Store's own batcher.
const maxNodes = 256

// reloadEvery bounds how often a Store asks its ClusterClient for the slot
// map, however many of its calls fail: the calls of a dead primary's keys
// go on failing until a replica takes over, and a store under load makes
// many. (go-redis, asked more often, waits 200 ms after a reload anyway.)
const reloadEvery = 200 * time.Millisecond

// nodes is what a Store over a ClusterClient keeps of its nodes: a batcher
// per primary, and when it last asked for the slot map.
type nodes struct {
	client   *redis.ClusterClient
	mu       sync.Mutex
	batchers map[string]*batcher
	reloaded atomic.Int64 // Unix ns
}

// reload asks the client of a Store over a Redis Cluster (else it does
// nothing) for the slot map again when err, the error of a command sent
// to a node, says that the map may be out of date (see stale); once per
// reloadEvery at most. The client reloads in the background, once for all
// the requests that arrive meanwhile (ClusterClient.ReloadState): the
// call that failed is not held up. Cheap enough for every error: on
// success it costs a comparison.
func (s *Store) reload(err error) {
	if err != nil && s.nodes != nil {
		s.nodes.reload(err)
	}
}

func (n *nodes) reload(err error) {
	if !stale(err) {
		return
	}
	now := time.Now().UnixNano()
	last := n.reloaded.Load()
	if now-last < int64(reloadEvery) || !n.reloaded.CompareAndSwap(last, now) {
		return
	}
	n.client.ReloadState(context.Background())
}

// stale reports whether err, the error of a command sent to a Cluster
// node, says that the client's slot map may be out of date: the node did
// not answer (no connection, a connection lost, no answer in time: it may
// be dead, and a replica promoted), or it answered that it does not serve
// the key's slot, or not now (MOVED and ASK, which go-redis follows only
// so many times; CLUSTERDOWN, TRYAGAIN; READONLY: a primary demoted to a
// replica). A call canceled by its caller says nothing of the node, nor
// does any other answer (NOSCRIPT, WRONGTYPE, …).
func stale(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask || redis.IsClusterDownError(err) || redis.IsTryAgainError(err) || redis.IsReadOnlyError(err)
}

// node returns the address of the Cluster primary that serves key, as
// the client's slot map has it now, or "" when the client is no
// ClusterClient or its slot map cannot be had by ctx's deadline.
func (s *Store) node(ctx context.Context, key string) string {
	if s.nodes == nil {
		return ""
	}
	n, err := s.nodes.client.MasterForKey(ctx, key)
	if err != nil {
		return ""
	}
	return n.Options().Addr
}

// batcher returns the batcher of c: on a Redis Cluster, that of the
// primary of c's keys (they share a slot); else the Store's.
func (s *Store) batcher(c *call) *batcher {
	if s.nodes == nil {
		return &s.batch
	}
	addr := s.node(c.ctx, keyOf(c.keys()[0]))
	s.nodes.mu.Lock()
	defer s.nodes.mu.Unlock()
	b, ok := s.nodes.batchers[addr]
	if !ok {
		if addr == "" || len(s.nodes.batchers) >= maxNodes {
			return &s.batch
		}
		b = new(batcher)
		s.nodes.batchers[addr] = b
	}
	return b
}

// Part returns the part of the store that holds the bucket of key under
// p: on a Redis Cluster, the address of the primary that serves its slot
// now ("" while the slot map cannot be had within Options.Timeout); else
// "", one part. A failover.Store keeps the health of each part apart, so
// that one dead Cluster primary degrades only the keys of its slots.
func (s *Store) Part(p *ratelimit.Policy, key string) string {
	if s.nodes == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	return s.node(ctx, s.key(ratelimit.BatchItem{Policy: p, Key: key}))
}

// waitCmd returns the WAIT that follows the writes of a round trip
// that must end by ctx's deadline, under Options.WaitReplicas: it asks for
// the replicas and waits at most three quarters of the time left, so that
// its answer comes back before the deadline, in whole milliseconds (at
// least one: WAIT 0 would wait for ever).
func (s *Store) waitCmd(ctx context.Context) *redis.IntCmd {
	ms := int64(1)
	if d, ok := ctx.Deadline(); ok {
		ms = max(ms, (time.Until(d) * 3 / 4).Milliseconds())
	}
	return redis.NewIntCmd(ctx, "wait", s.replicas, ms)
}

// acked sets on each of cmds that succeeded the error of wait, when the
// replicas it asked for did not all acknowledge their writes.
func (s *Store) acked(wait *redis.IntCmd, cmds ...*redis.Cmd) {
	err := wait.Err()
	if n := wait.Val(); err == nil && n < s.replicas {
		err = fmt.Errorf("Options.WaitReplicas %d: WAIT: %d acknowledged in time", s.replicas, n)
	} else if err != nil {
		err = fmt.Errorf("Options.WaitReplicas %d: WAIT: %w", s.replicas, err)
	}
	if err == nil {
		return
	}
	for _, cmd := range cmds {
		if cmd.Err() == nil {
			cmd.SetErr(err)
		}
	}
}

// byPrimary returns cmds by the client of the primary that runs them:
// all on the Store's client, but on a Cluster each on its key's primary
// (nil: the slot map could not be had; they fail).
func (s *Store) byPrimary(ctx context.Context, cmds []*redis.Cmd) map[processor][]*redis.Cmd {
	if s.nodes == nil {
		return map[processor][]*redis.Cmd{s.proc: cmds}
	}
	out := make(map[processor][]*redis.Cmd, 1)
	for _, cmd := range cmds {
		n, err := s.nodes.client.MasterForKey(ctx, keyOf(cmd.Args()[3])) // EVALSHA sha n key…
		if err != nil {
			cmd.SetErr(err)
			continue
		}
		out[n] = append(out[n], cmd)
	}
	return out
}
