package redisstore

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxBatch caps the calls sent in one round trip, so that it stays short
// next to the deadlines of the calls queued behind it.
const maxBatch = 256

// A batcher sends the calls of concurrent decisions together: while a
// round trip is in flight, the calls that arrive queue up, and when it ends
// they all leave in the next. A call that finds nothing in flight is sent at
// once on its caller's goroutine, so a lone caller waits for nothing but its
// own round trip; under load there are fewer round trips than decisions,
// since each carries every call that queued during the one before.
//
// A batch is as few script calls as the client allows, each deciding many
// calls (one group of the script each, independent of the others), so that
// Redis pays a script call's fixed cost once for all of them: one script
// call on a *redis.Client, one per slot on a *redis.ClusterClient, and one
// per call on a *redis.Ring, whose shards cannot be known; several script
// calls go in one pipeline, which go-redis splits by node.
//
// No goroutine outlives the calls: the caller whose round trip ends with
// calls queued starts one goroutine that sends them, and the batches that
// queue behind those, and ends when the queue is empty. A queued call
// derives no context of its own: its batch's round trip has the earliest
// of its calls' deadlines (call.deadline), and since calls queue in the
// order they start, with the same Options.Timeout, every call's round
// trip, and those it waits behind, end by its own deadline, even when
// Redis hangs. A caller's own context is honoured while it waits.
//
// The zero value is ready to use.
type batcher struct {
	mu    sync.Mutex
	busy  bool    // a round trip is in flight
	queue []*call // calls waiting for it to end
}

// send decides c through s's client, with the calls that arrive while a
// round trip is in flight, and returns its reply or error. It returns when
// c is decided or its context ends, whichever is first.
func (b *batcher) send(s *Store, c *call) ([]any, error) {
	b.mu.Lock()
	if !b.busy {
		b.busy = true
		b.mu.Unlock()
		defer b.next(s)
		s.alone(c)
		return c.reply, c.err
	}
	c.done = make(chan struct{})
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case <-c.done:
	case <-c.ctx.Done():
		select {
		case <-c.done: // decided as the context ended: take the decision
		default:
			// The batch may be in flight; the caller does not wait for it,
			// and leaves c to the goroutine that sends it. (A call not sent
			// yet never will be.)
			return nil, c.ctx.Err()
		}
	}
	return c.reply, c.err
}

// next starts the round trip of the calls queued during the one that just
// ended, on a goroutine of its own, or records that none is in flight.
func (b *batcher) next(s *Store) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.busy = false
		return
	}
	r := new(round)
	r.start(s, b.take(nil))
	go b.flush(s, r)
}

// flush sends r, then every batch that queues meanwhile, until the queue
// is empty. After each round trip it yields once, so that the callers it
// woke, and others ready to run, may queue their next calls and leave in
// the next batch rather than the one after.
func (b *batcher) flush(s *Store, r *round) {
	for {
		r.exec(s)
		runtime.Gosched()
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.busy = false
			b.mu.Unlock()
			return
		}
		r.start(s, b.take(r.calls[:0]))
		b.mu.Unlock()
	}
}

// take moves up to maxBatch calls from the queue into spare and returns
// them. b.mu is held.
func (b *batcher) take(spare []*call) []*call {
	if len(b.queue) <= maxBatch {
		batch := b.queue
		b.queue = spare
		return batch
	}
	batch := append(spare, b.queue[:maxBatch]...)
	n := copy(b.queue, b.queue[maxBatch:])
	clear(b.queue[n:])
	b.queue = b.queue[:n]
	return batch
}

// fail ends every queued call with err, the error of a refused dial (see
// dialWatch): those queued and, since round.start registers a batch with
// the dial watch under b.mu, those in flight are all reached.
func (b *batcher) fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.queue {
		c.err = err
		close(c.done)
	}
	clear(b.queue)
	b.queue = b.queue[:0]
}

// A round is one batch's round trip: the calls still wanted, under one
// context with the earliest of their deadlines, watched for a refused
// dial. One round serves every batch a flush sends, one after another.
type round struct {
	calls    []*call
	deadline time.Time
	ctx      context.Context
	cancel   context.CancelFunc
	watch    watcher
}

// start readies r to send batch: a call whose caller has given up, or
// whose deadline has passed, is answered at once and not sent. It runs
// under the batcher's lock (see batcher.fail).
func (r *round) start(s *Store, batch []*call) {
	r.calls, r.deadline = batch[:0], time.Time{}
	now := time.Now()
	for _, c := range batch {
		switch {
		case c.ctx.Err() != nil:
			c.err = c.ctx.Err()
		case !now.Before(c.deadline):
			c.err = s.timedOut(context.DeadlineExceeded)
		default:
			if r.deadline.IsZero() || c.deadline.Before(r.deadline) {
				r.deadline = c.deadline
			}
			r.calls = append(r.calls, c)
			continue
		}
		close(c.done)
	}
	clear(batch[len(r.calls):])
	if len(r.calls) == 0 {
		return
	}
	// The round trip belongs to no caller: it must go on when one of them
	// is canceled. It carries the first caller's values (for tracing
	// hooks, say).
	r.ctx, r.cancel = context.WithDeadline(context.WithoutCancel(r.calls[0].ctx), r.deadline)
	s.dials.watch(&r.watch, r.ctx, r.cancel)
}

// exec decides the calls of r in one round trip and wakes their callers.
// Script calls that meet NOSCRIPT (a Redis restarted, or SCRIPT FLUSH) are
// sent again as EVAL, which loads the script, in a second round trip.
func (r *round) exec(s *Store) {
	if len(r.calls) == 0 {
		return
	}
	groups, cmds := s.dispatch(r.ctx, r.calls)
	s.dials.done(&r.watch)
	r.cancel()
	timedOut := !time.Now().Before(r.deadline)
	for i, g := range groups {
		if err := cmds[i].Err(); err != nil {
			if err = r.watch.cause(err); timedOut {
				err = s.timedOut(err)
			}
			cmds[i].SetErr(err)
		}
		settle(cmds[i], g...)
		for _, c := range g {
			close(c.done)
		}
	}
	r.watch = watcher{}
	clear(r.calls)
	r.ctx, r.cancel = nil, nil
}

// dispatch sends calls, one group each, in one round trip: in as few
// script calls as split allows, pipelined when there are several (see
// Store.send). It returns the script calls and the calls each decided.
func (s *Store) dispatch(ctx context.Context, calls []*call) ([][]*call, []*redis.Cmd) {
	groups := split(s.proc, calls)
	cmds := make([]*redis.Cmd, len(groups))
	for i, g := range groups {
		cmds[i] = command(ctx, g)
	}
	if len(cmds) == 1 {
		cmds[0] = s.process(ctx, cmds[0])
		return groups, cmds
	}
	s.send(ctx, cmds)
	return groups, cmds
}

// send sends cmds, script calls, in one round trip (the command alone, or
// a pipeline, which go-redis splits by node on a ClusterClient or a Ring),
// and again as EVAL, which loads the script, those that meet NOSCRIPT (a
// Redis restarted or promoted, or SCRIPT FLUSH), in a second. With
// Options.WaitReplicas, each round trip ends with a WAIT on the primary
// that ran the script calls, whose writes fail unless acknowledged. Each
// of cmds is replaced by the command whose reply or error it has.
func (s *Store) send(ctx context.Context, cmds []*redis.Cmd) {
	s.trip(ctx, cmds)
	var retry []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			cmds[i] = evalOf(ctx, cmd)
			retry = append(retry, i)
		}
	}
	if retry == nil {
		return
	}
	again := make([]*redis.Cmd, len(retry))
	for j, i := range retry {
		again[j] = cmds[i]
	}
	s.trip(ctx, again)
}

// trip sends cmds in one round trip, as send says.
func (s *Store) trip(ctx context.Context, cmds []*redis.Cmd) {
	if s.replicas == 0 {
		pipe := s.proc.Pipeline()
		for _, cmd := range cmds {
			_ = pipe.Process(ctx, cmd)
		}
		_, _ = pipe.Exec(ctx)
		for _, cmd := range cmds {
			s.reload(cmd.Err())
		}
		return
	}
	// A WAIT counts the writes of its own connection: it goes in one
	// pipeline with them, on their primary's client. On a Cluster, the
	// commands of each primary go one primary after another.
	for p, cmds := range s.byPrimary(ctx, cmds) {
		pipe := p.Pipeline()
		for _, cmd := range cmds {
			_ = pipe.Process(ctx, cmd)
		}
		wait := s.waitCmd(ctx)
		_ = pipe.Process(ctx, wait)
		_, _ = pipe.Exec(ctx)
		for _, cmd := range cmds {
			s.reload(cmd.Err())
		}
		s.reload(wait.Err())
		s.acked(wait, cmds...)
	}
}

// split divides calls into the script calls that decide them: all in one
// on a *redis.Client, by slot on a *redis.ClusterClient (the keys of one
// call share a slot: see TakeAll), one each on anything else.
func split(p processor, calls []*call) [][]*call {
	switch p.(type) {
	case *redis.Client:
		return [][]*call{calls}
	case *redis.ClusterClient:
		var groups [][]*call
		slots := make(map[int]int, len(calls)) // slot → index in groups
		for _, c := range calls {
			slot := slotOf(keyOf(c.keys()[0]))
			i, ok := slots[slot]
			if !ok {
				i = len(groups)
				slots[slot] = i
				groups = append(groups, nil)
			}
			groups[i] = append(groups[i], c)
		}
		return groups
	}
	groups := make([][]*call, len(calls))
	for i := range calls {
		groups[i] = calls[i : i+1 : i+1]
	}
	return groups
}
