package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
	"github.com/tokenfair/ratelimit/internal/keyhash"
	"github.com/tokenfair/ratelimit/internal/storeerr"
)

var (
	//go:embed take.lua
	takeSource string
	takeScript = redis.NewScript(takeSource)
)

// The script's arguments that do not change, boxed once.
var (
	argEvalSha any = "evalsha"
	argEval    any = "eval"
	argSHA     any = takeScript.Hash()
	argSource  any = takeSource
	argNone    any = ""
)

// run decides reqs, as one group of the script (see take.lua), and fills
// results.
func (s *Store) run(parent context.Context, reqs []ratelimit.BatchItem, results []ratelimit.Result) error {
	var buf [4]period
	periods := s.periods(reqs, buf[:0])
	reply, now, err := s.group(parent, reqs, periods, appendKind)
	if err != nil {
		return err
	}
	for i, r := range reqs {
		allowed, ahead, credit, err := decision(reply, i)
		if err != nil {
			return err
		}
		if periods != nil && periods[i].end != 0 {
			end := periods[i].at(now)
			results[i] = quotaResult(r.Policy, end, ahead, r.Cost, end-now)
			results[i].Until = algo.Add(results[i].Until, credit) // see take.lua's "refund"
		} else {
			// The script reports how far the state is ahead of now, which
			// with now is the state it decided on (at most the int64 limit).
			var next int64
			results[i], next = r.Policy.Decide(now+ahead, now, r.Cost)
			results[i].Until = algo.Add(next, credit) // see take.lua's "refund"
		}
		if allowed > 1 || results[i].Allowed != (allowed == 1) {
			return fmt.Errorf("redisstore: the script decided %d with the state %d ahead of now, the algorithm %v", allowed, ahead, results[i].Allowed)
		}
	}
	return nil
}

// A period is what the script needs to decide a request of a calendar
// quota: the end of the period that holds the caller's now, and the next
// period's end, in Unix nanoseconds. The zero period is a rate's request.
type period struct{ end, next int64 }

// periods returns the period of each request of reqs that is a calendar
// quota's, at this instance's now (zero for the others), in buf, or nil
// when none is.
func (s *Store) periods(reqs []ratelimit.BatchItem, buf []period) []period {
	var ps []period
	var at time.Time
	for i, r := range reqs {
		if r.Policy.Limit.Interval() != 0 {
			continue // a rate
		}
		if ps == nil {
			ps = slices.Grow(buf[:0], len(reqs))[:len(reqs)]
			at = time.Now()
			if s.now != nil {
				at = s.now()
			}
		}
		_, end := r.Policy.Limit.Period(at)
		_, next := r.Policy.Limit.Period(end)
		ps[i] = period{end.UnixNano(), next.UnixNano()}
	}
	return ps
}

// at returns the time the script decides q's request at, now being its
// own: the end of the caller's period while now is before it, else the
// next period's end.
func (q period) at(now int64) int64 {
	if now < q.end {
		return q.end
	}
	return q.next
}

// quotaResult returns the decision of a request of cost under p, a
// calendar quota, on a bucket whose state is ahead past end, the end of
// one of its periods, that period ending after resetAfter: the decision
// of the script, which chose the period (see period.at), or of the
// refusal cache. Until is the new state, without the credit.
func quotaResult(p *ratelimit.Policy, end, ahead, cost, resetAfter int64) ratelimit.Result {
	// The period's last instant is decided at its end, as the script does.
	res, _ := p.Decide(end+ahead, end-1, cost)
	res.ResetAfter = time.Duration(max(resetAfter, 0))
	if res.RetryAfter > 0 {
		res.RetryAfter = res.ResetAfter
	}
	return res
}

// group sends reqs as one group of the script, within the store's
// Timeout, with the kind and arguments of each that appendArgs appends
// (given its period, of periods, if it is a calendar quota's), and returns
// the group's reply and the time it was decided at.
func (s *Store) group(parent context.Context, reqs []ratelimit.BatchItem, periods []period, appendArgs func([]any, ratelimit.BatchItem, period) []any) ([]any, int64, error) {
	c := s.newCall(parent, len(reqs))
	c.deadline = time.Now().Add(s.timeout)
	for i, r := range reqs {
		c.setKey(i, s.key(r))
		var q period
		if periods != nil {
			q = periods[i]
		}
		c.args = appendArgs(c.args, r, q)
	}
	reply, err := s.decide(c)
	if errors.Is(err, storeerr.ErrKeyState) {
		return nil, 0, keyError(reqs, err)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("redisstore: %w", err)
	}
	now, err := groupNow(reply, len(reqs))
	return reply, now, err
}

// groupNow returns the time at which the script decided a group of n keys,
// the pair that ends its reply, in Unix nanoseconds.
func groupNow(reply []any, n int) (int64, error) {
	if len(reply) != 5*n+2 {
		return 0, fmt.Errorf("redisstore: malformed reply %v", reply)
	}
	now, ok := span(reply, 5*n)
	if !ok {
		return 0, fmt.Errorf("redisstore: malformed reply %v", reply)
	}
	return now, nil
}

// decision returns the i-th decision of a group's reply: what the script
// decided (0 refused, 1 allowed, 2 + E a lease granted in epoch E), how
// far the state was ahead of now, and the bucket's credit after the
// decision, in nanoseconds.
func decision(reply []any, i int) (allowed, ahead, credit int64, err error) {
	allowed, ok1 := reply[5*i].(int64)
	ahead, ok2 := span(reply, 5*i+1)
	credit, ok3 := span(reply, 5*i+3)
	if !ok1 || !ok2 || !ok3 || allowed < 0 {
		return 0, 0, 0, fmt.Errorf("redisstore: malformed reply %v", reply)
	}
	return allowed, ahead, credit, nil
}

// span returns the pair of seconds and nanoseconds at reply[i:i+2] in
// nanoseconds, if it is one that an int64 holds.
func span(reply []any, i int) (int64, bool) {
	sec, ok1 := reply[i].(int64)
	nsec, ok2 := reply[i+1].(int64)
	const maxSec, maxNsec = math.MaxInt64 / 1_000_000_000, math.MaxInt64 % 1_000_000_000
	if !ok1 || !ok2 || sec < 0 || sec > maxSec || nsec < 0 || nsec >= 1e9 || sec == maxSec && nsec > maxNsec {
		return 0, false
	}
	return sec*1e9 + nsec, true
}

// newCall returns a call of the script that decides n keys as one group:
// EVALSHA sha n key… n now-s now-n, the keys for the caller to set
// (setKey) and each key's kind and arguments to append (see appendKind).
// A call of one key holds its arguments in itself: one allocation.
func (s *Store) newCall(ctx context.Context, n int) *call {
	c := &call{ctx: ctx, n: n}
	if n == 1 {
		c.args = c.one[:4]
	} else {
		c.args = make([]any, 3+n, 9+6*n)
	}
	c.args[0], c.args[1], c.args[2] = argEvalSha, argSHA, n
	c.args = append(c.args, n, argNone, argNone)
	if s.now != nil {
		ns := s.now().UnixNano()
		c.args[4+n], c.args[5+n] = ns/1e9, ns%1e9
	}
	return c
}

// appendKind appends to args the kind of r's decision and its arguments
// (see take.lua): the increment and the bound, pairs of seconds and
// nanoseconds, and for a calendar quota the ends of its period q.
// TokenBucket, LeakyPolice and a penalty box's algo.Strikes are all a
// token bucket, "gcra"; a quota is a token bucket of a token a nanosecond.
func appendKind(args []any, r ratelimit.BatchItem, q period) []any {
	iv := int64(r.Policy.Limit.Interval())
	var kind any = "gcra"
	inc, bound := algo.Mul(r.Cost, iv), r.Policy.Limit.Burst()*iv // a charge's cost may be any int64
	switch {
	case q.end != 0:
		kind, inc, bound = "quota", r.Cost, r.Policy.Limit.Burst()
		if r.Policy.Algorithm == algo.Debt {
			kind = "quota-debt"
		}
		return appendPeriod(append(args, kind, inc/1e9, inc%1e9, bound/1e9, bound%1e9), q)
	case r.Policy.Algorithm == ratelimit.LeakyShape:
		kind, bound = "shape", algo.ShapeBound(iv, r.Policy.Limit.Burst(), int64(r.Policy.MaxDelay), r.Policy.Immediate)
	case r.Policy.Algorithm == algo.Ban:
		kind, inc = "ban", r.Cost // a ban's length, in nanoseconds
	case r.Policy.Algorithm == algo.Debt:
		kind = "debt"
	}
	return append(args, kind, inc/1e9, inc%1e9, bound/1e9, bound%1e9)
}

// appendPeriod appends to args the ends of a calendar quota's period q, a
// pair each.
func appendPeriod(args []any, q period) []any {
	return append(args, q.end/1e9, q.end%1e9, q.next/1e9, q.next%1e9)
}

// A call is one group of the script on its way to Redis: the requests of
// one Take or TakeAll, decided all or nothing.
type call struct {
	ctx      context.Context // the caller's
	deadline time.Time       // the store's: Options.Timeout after the call began
	n        int             // the number of keys
	args     []any           // the call as a command of its own: EVALSHA sha n keys… m now… (…)…
	reply    []any           // once decided: per key allowed, ahead-s, ahead-n
	err      error           // or why it could not be
	done     chan struct{}   // for a queued call: closed once reply or err is set
	one      [15]any         // args' backing array for a call of one key (a calendar quota's needs one more)
	key      string          // the key of a call of one key, in args as *string
}

func (c *call) keys() []any { return c.args[3 : 3+c.n] }

// setKey sets the i-th key of c: for a call of one key, as a pointer to
// c.key, which go-redis writes as the string and which is not boxed anew.
func (c *call) setKey(i int, key string) {
	if c.n == 1 {
		c.key = key
		c.args[3] = &c.key
		return
	}
	c.args[3+i] = key
}

// keyOf returns a key of a call's args, set by setKey.
func keyOf(k any) string {
	if p, ok := k.(*string); ok {
		return *p
	}
	return k.(string)
}

func (c *call) argv() []any { return c.args[3+c.n:] }

// decide sends c and returns its reply or error, which names the deadline
// or a refused dial when either ended the call (see failure). Through a
// go-redis client it may share a round trip with concurrent calls (see
// batcher), unless Options.NoBatching; through any other Scripter it goes
// alone.
func (s *Store) decide(c *call) ([]any, error) {
	if s.proc != nil && s.batching {
		return s.batcher(c).send(s, c)
	}
	s.alone(c)
	return c.reply, c.err
}

// alone sends c in a round trip of its own, under a context with its
// deadline, watched for a refused dial.
func (s *Store) alone(c *call) {
	ctx, cancel := context.WithDeadline(c.ctx, c.deadline)
	defer cancel()
	var w watcher
	s.dials.watch(&w, ctx, cancel)
	defer s.dials.done(&w)
	if s.proc == nil {
		s.runAlone(ctx, c)
	} else {
		settle(s.process(ctx, redis.NewCmd(ctx, c.args...)), c)
	}
	s.dials.done(&w) // before reading w.cause
	if c.err != nil && !errors.Is(c.err, storeerr.ErrKeyState) {
		c.err = s.failure(c.ctx, ctx, &w, c.err)
	}
}

// runAlone sends c under ctx through a Scripter that is no go-redis
// client, with EVALSHA, and EVAL when the server lacks the script.
func (s *Store) runAlone(ctx context.Context, c *call) {
	keys := make([]string, c.n)
	for i, k := range c.keys() {
		keys[i] = keyOf(k)
	}
	settle(takeScript.Run(ctx, s.client, keys, c.argv()...), c)
}

// command returns the script call that decides calls, one group each.
func command(ctx context.Context, calls []*call) *redis.Cmd {
	if len(calls) == 1 {
		return redis.NewCmd(ctx, calls[0].args...)
	}
	keys, size := 0, 3
	for _, c := range calls {
		keys += c.n
		size += len(c.args) - 3
	}
	args := make([]any, 3, size)
	args[0], args[1], args[2] = argEvalSha, argSHA, keys
	for _, c := range calls {
		args = append(args, c.keys()...)
	}
	for _, c := range calls {
		args = append(args, c.argv()...)
	}
	return redis.NewCmd(ctx, args...)
}

// settle sets the reply or error of each of calls from cmd, the script
// call that decided them, one group each.
func settle(cmd *redis.Cmd, calls ...*call) {
	err := cmd.Err()
	groups, ok := cmd.Val().([]any)
	if err == nil && (!ok || len(groups) != len(calls)) {
		err = fmt.Errorf("malformed reply %v", cmd.Val())
	}
	for i, c := range calls {
		if err != nil {
			c.err = err
			continue
		}
		switch g := groups[i].(type) {
		case []any:
			c.reply = g
		case error: // the group's own, such as WRONGTYPE: the others stand
			c.err = keyState(g)
		default:
			c.err = fmt.Errorf("malformed reply %v", groups[i])
		}
	}
}

// keyState returns the error of a group that the script could not decide,
// g: one of its keys holds no rate-limit state (take.lua returns no other
// error for a group). It wraps storeerr.ErrKeyState, and never quotes the
// key, which g may.
func keyState(g error) error {
	if redis.HasErrorPrefix(g, "WRONGTYPE") {
		return fmt.Errorf("%w: the Redis key holds another type of value (WRONGTYPE)", storeerr.ErrKeyState)
	}
	return fmt.Errorf("%w: the Redis key's value is no rate-limit state", storeerr.ErrKeyState)
}

// keyError returns err, the keyState error of the group of reqs, naming
// their policies and the keyed hashes of their keys (as
// ratelimit.Event.KeyHash has them, in this process), never the keys.
func keyError(reqs []ratelimit.BatchItem, err error) error {
	var b strings.Builder
	if len(reqs) > 1 {
		b.WriteString("one of ")
	}
	for i, r := range reqs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "policy %q key hash %016x", r.Policy.Name, keyhash.Sum(r.Key))
	}
	return fmt.Errorf("redisstore: %s: %w", b.String(), err)
}

// process sends cmd alone (see send), and returns the command whose reply
// or error it has.
func (s *Store) process(ctx context.Context, cmd *redis.Cmd) *redis.Cmd {
	if s.replicas == 0 { // the common case, without send's allocations
		_ = s.proc.Process(ctx, cmd)
		if isNoScript(cmd.Err()) {
			cmd = evalOf(ctx, cmd)
			_ = s.proc.Process(ctx, cmd)
		}
		s.reload(cmd.Err())
		return cmd
	}
	cmds := []*redis.Cmd{cmd}
	s.send(ctx, cmds)
	return cmds[0]
}

// evalOf returns cmd, an EVALSHA of the take script, as an EVAL, which
// also loads the script into Redis's cache.
func evalOf(ctx context.Context, cmd *redis.Cmd) *redis.Cmd {
	args := slices.Clone(cmd.Args())
	args[0], args[1] = argEval, argSource
	return redis.NewCmd(ctx, args...)
}

func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }
