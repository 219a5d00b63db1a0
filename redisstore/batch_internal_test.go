package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// These tests compose batches exactly: Redis is paused (SIGSTOP) while the
// first call is in flight, calls queue behind it, and Redis resumes once
// the queue holds what the test wants.

// batchPolicy refills a token every 12 minutes: nothing refills while a
// test runs.
var batchPolicy = &ratelimit.Policy{Name: "api", Limit: ratelimit.Per(5, time.Hour).WithBurst(10)}

// batchSlack covers scheduling on a loaded 2-core machine and the race
// detector: no call may take longer than its deadline plus this.
const batchSlack = time.Second

// trips records the round trips of a client's script calls: for each, the
// script calls it carried, as "evalsha/8" for an EVALSHA of 8 keys.
// (go-redis's own commands, CLIENT SETINFO on a new connection for one,
// are left out.)
type trips struct {
	mu     sync.Mutex
	rounds [][]string
	after  func(cmd redis.Cmder) // runs after a command sent alone
}

func (h *trips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record([]redis.Cmder{cmd})
		err := next(ctx, cmd)
		h.mu.Lock()
		after := h.after
		h.mu.Unlock()
		if after != nil {
			after(cmd)
		}
		return err
	}
}

func (h *trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(cmds)
		return next(ctx, cmds)
	}
}

func (h *trips) record(cmds []redis.Cmder) {
	var round []string
	for _, c := range cmds {
		if name := c.Name(); name == "eval" || name == "evalsha" {
			round = append(round, fmt.Sprintf("%s/%v", name, c.Args()[2]))
		}
	}
	if round != nil {
		h.mu.Lock()
		h.rounds = append(h.rounds, round)
		h.mu.Unlock()
	}
}

func (h *trips) get() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]string(nil), h.rounds...)
}

// batchFixture is a batching store with the given timeout on a Redis of
// its own, with its round trips recorded from the start.
func batchFixture(t *testing.T, timeout time.Duration) (*redistest.Server, *redis.Client, *Store, *trips) {
	t.Helper()
	srv := redistest.Start(t)
	client := srv.Client()
	h := new(trips)
	client.AddHook(h)
	s, err := New(client, &Options{Timeout: timeout})
	require.NoError(t, err)
	return srv, client, s, h
}

// result is what one Take returned.
type result struct {
	res ratelimit.Result
	err error
}

// goTake runs Take on a goroutine of its own and returns where its result
// will arrive.
func goTake(s *Store, ctx context.Context, key string, cost int64) <-chan result {
	ch := make(chan result, 1)
	go func() {
		res, err := s.Take(ctx, batchPolicy, key, cost)
		ch <- result{res, err}
	}()
	return ch
}

// inFlight waits until a round trip of s is in flight and n calls queue
// behind it. (No sleep: it yields until they do.)
func inFlight(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.batch.mu.Lock()
		busy, queued := s.batch.busy, len(s.batch.queue)
		s.batch.mu.Unlock()
		if busy && queued >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("busy %v with %d calls queued, want %d", busy, queued, n)
		}
		runtime.Gosched()
	}
}

// TestBatchOneRoundTrip: the calls that queue behind a round trip leave
// together in one pipeline, each with its own decision.
func TestBatchOneRoundTrip(t *testing.T) {
	srv, _, s, h := batchFixture(t, 5*time.Second)
	ctx := context.Background()
	_, err := s.Take(ctx, batchPolicy, "warm-up", 1) // loads the script
	require.NoError(t, err)

	srv.Pause()
	first := goTake(s, ctx, "k0", 1)
	inFlight(t, s, 0)
	var rest []<-chan result
	for i := 1; i <= 8; i++ {
		rest = append(rest, goTake(s, ctx, fmt.Sprint("k", i%3), int64(i)))
		inFlight(t, s, i) // one at a time, so that the queue's order is known
	}
	srv.Resume()

	r := <-first
	require.NoError(t, r.err)
	assert.True(t, r.res.Allowed)
	spent := map[string]int64{"k0": 1}
	for i, ch := range rest {
		key, cost := fmt.Sprint("k", (i+1)%3), int64(i+1)
		r := <-ch
		require.NoError(t, r.err, "call %d", i+1)
		want := spent[key]+cost <= 10
		assert.Equal(t, want, r.res.Allowed, "Take(%q, %d) after %d spent", key, cost, spent[key])
		if want {
			spent[key] += cost
		}
		if r.res.Allowed {
			assert.Equal(t, 10-spent[key], r.res.Remaining, "Take(%q, %d)", key, cost)
		}
	}
	assert.Equal(t, [][]string{
		{"evalsha/1"}, {"eval/1"}, // the warm-up, which loads the script
		{"evalsha/1"}, // the first call
		{"evalsha/8"}, // the eight queued behind it, in one script call
	}, h.get())
}

// TestBatchCap: a pipeline carries at most maxBatch calls; the rest leave
// in the next.
func TestBatchCap(t *testing.T) {
	srv, _, s, h := batchFixture(t, 5*time.Second)
	ctx := context.Background()
	_, err := s.Take(ctx, batchPolicy, "warm-up", 1)
	require.NoError(t, err)

	srv.Pause()
	first := goTake(s, ctx, "k", 0)
	inFlight(t, s, 0)
	var rest []<-chan result
	for i := range maxBatch + 44 {
		rest = append(rest, goTake(s, ctx, fmt.Sprint("k", i), 1))
	}
	inFlight(t, s, maxBatch+44)
	srv.Resume()
	for i, ch := range append(rest, first) {
		r := <-ch
		require.NoError(t, r.err, "call %d", i)
		assert.True(t, r.res.Allowed, "call %d", i)
	}
	rounds := h.get()
	assert.Equal(t, [][]string{{fmt.Sprint("evalsha/", maxBatch)}, {"evalsha/44"}}, rounds[len(rounds)-2:])
}

// TestBatchErrorsStayApart: a call that fails in Redis (a key of the wrong
// type) fails alone; the others in its script call are decided.
func TestBatchErrorsStayApart(t *testing.T) {
	srv, client, s, h := batchFixture(t, 5*time.Second)
	ctx := context.Background()
	require.NoError(t, client.HSet(ctx, "ratelimit:api:hash", "f", "v").Err())
	_, err := s.Take(ctx, batchPolicy, "warm-up", 1)
	require.NoError(t, err)

	srv.Pause()
	first := goTake(s, ctx, "a", 1)
	inFlight(t, s, 0)
	bad := goTake(s, ctx, "hash", 1)
	inFlight(t, s, 1)
	good := goTake(s, ctx, "b", 1)
	inFlight(t, s, 2)
	srv.Resume()

	for name, ch := range map[string]<-chan result{"first": first, "good": good} {
		r := <-ch
		require.NoError(t, r.err, name)
		assert.True(t, r.res.Allowed, name)
	}
	r := <-bad
	assert.ErrorContains(t, r.err, "WRONGTYPE")
	assert.Equal(t, ratelimit.Result{}, r.res)
	rounds := h.get()
	assert.Equal(t, []string{"evalsha/2"}, rounds[len(rounds)-1], "the bad call and the good one shared a script call")
}

// TestBatchNoScript: a pipeline that meets NOSCRIPT (the script cache
// flushed while it queued) is sent again as EVAL, which loads the script.
func TestBatchNoScript(t *testing.T) {
	srv, client, s, h := batchFixture(t, 5*time.Second)
	other := srv.Client()
	ctx := context.Background()
	_, err := s.Take(ctx, batchPolicy, "warm-up", 1)
	require.NoError(t, err)

	// Flush the script cache right after the first call is answered,
	// before the calls queued behind it leave.
	var once sync.Once
	h.mu.Lock()
	h.after = func(redis.Cmder) {
		once.Do(func() { assert.NoError(t, other.ScriptFlush(ctx).Err()) })
	}
	h.mu.Unlock()
	srv.Pause()
	first := goTake(s, ctx, "a", 1)
	inFlight(t, s, 0)
	var rest []<-chan result
	for i := 1; i <= 3; i++ {
		rest = append(rest, goTake(s, ctx, "b", 1))
		inFlight(t, s, i)
	}
	srv.Resume()

	for i, ch := range append([]<-chan result{first}, rest...) {
		r := <-ch
		require.NoError(t, r.err, "call %d", i)
		assert.True(t, r.res.Allowed, "call %d", i)
	}
	res, err := s.Take(ctx, batchPolicy, "b", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(7), res.Remaining, "each of the three calls spent once, not twice")
	rounds := h.get()
	assert.Equal(t, [][]string{{"evalsha/1"}, {"evalsha/3"}, {"eval/3"}, {"evalsha/1"}}, rounds[len(rounds)-4:],
		"the first call, the queued three (NOSCRIPT), the same as EVAL, the last look")
	n, err := client.ScriptExists(ctx, takeScript.Hash()).Result()
	require.NoError(t, err)
	assert.Equal(t, []bool{true}, n, "the script is loaded again")
}

// TestBatchCallerDeadline: a queued caller whose context ends returns at
// once, while the round trip ahead of it is still in flight; a call whose
// caller has given up before it left is never sent.
func TestBatchCallerDeadline(t *testing.T) {
	srv, _, s, h := batchFixture(t, 5*time.Second)
	ctx := context.Background()
	_, err := s.Take(ctx, batchPolicy, "k", 1)
	require.NoError(t, err)

	srv.Pause()
	first := goTake(s, ctx, "k", 1) // the store's deadline: 5 s
	inFlight(t, s, 0)
	// (Long enough for the three calls to queue on a loaded machine, and
	// still far from the store's 5 s.)
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	canceled, cancel := context.WithCancel(ctx)
	start := time.Now()
	a := goTake(s, short, "k", 1)
	b := goTake(s, canceled, "k", 1)
	patient := goTake(s, ctx, "other", 1)
	inFlight(t, s, 3)
	cancel()
	r := <-b
	assert.ErrorIs(t, r.err, context.Canceled)
	r = <-a
	assert.ErrorIs(t, r.err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 500*time.Millisecond+batchSlack, "the short deadline, not the round trip's")
	select {
	case r := <-first:
		t.Fatalf("the first call returned %+v while Redis was paused", r)
	default:
	}
	srv.Resume()

	r = <-first
	require.NoError(t, r.err)
	assert.Equal(t, int64(8), r.res.Remaining)
	r = <-patient
	require.NoError(t, r.err)
	assert.True(t, r.res.Allowed)
	res, err := s.Take(ctx, batchPolicy, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(8), res.Remaining, "the calls given up were not sent")
	rounds := h.get()
	assert.Equal(t, [][]string{{"evalsha/1"}, {"evalsha/1"}, {"evalsha/1"}}, rounds[len(rounds)-3:],
		"the first call, the one call left (alone), the last look")
}

// TestBatchDeadlineWhilePaused: with Redis hung, every caller fails within
// its own deadline, whether it leads a round trip or queues behind one.
func TestBatchDeadlineWhilePaused(t *testing.T) {
	srv, _, s, _ := batchFixture(t, 50*time.Millisecond)
	ctx := context.Background()
	_, err := s.Take(ctx, batchPolicy, "k", 1)
	require.NoError(t, err)
	srv.Pause()
	defer srv.Resume()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, err := s.Take(ctx, batchPolicy, fmt.Sprint("k", i), 1)
			switch elapsed := time.Since(start); {
			case elapsed > 50*time.Millisecond+batchSlack:
				errs <- fmt.Errorf("a call took %v", elapsed)
			case err == nil:
				errs <- errors.New("a call succeeded while Redis was paused")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
}
