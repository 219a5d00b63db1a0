package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/tokenfair/ratelimit"
)

var _ ratelimit.ResetStore = (*Store)(nil)

// resetScript deletes a bucket (KEYS[1]) and, when it has a mark (KEYS[2]),
// sets the mark to the time of the reset (ARGV 1 and 2, or "" "" for the
// server's clock) plus ARGV 3 and 4, for ARGV 5 ms, as take.lua keeps a
// state: Refund gives nothing back of a take made before the reset. A
// script like every other call of the store, so that it runs on any
// redis.Scripter and goes to the key's node on a Cluster.
var resetScript = redis.NewScript(`
local n = redis.call("DEL", KEYS[1])
if KEYS[2] then
  local s, ns = tonumber(ARGV[1]), tonumber(ARGV[2])
  if not s then
    local t = redis.call("TIME")
    s, ns = tonumber(t[1]), tonumber(t[2]) * 1000
  end
  s, ns = s + tonumber(ARGV[3]), ns + tonumber(ARGV[4])
  if ns >= 1000000000 then
    s, ns = s + 1, ns - 1000000000
  end
  redis.call("SET", KEYS[2], string.format("%d:%d", s, ns), "PX", ARGV[5])
end
return n
`)

// Reset implements [ratelimit.ResetStore] in one round trip: it deletes
// key's bucket under p (DEL of PREFIX + POLICY + ":" + KEY), with the
// tokens leased from it, within the store's Timeout, and drops what this
// instance's refusal cache and lease know of it, so that its next request
// goes to Redis and finds the bucket full. Deleting a bucket that Redis
// does not hold is not an error.
//
// Other instances are not told. One whose refusal cache holds a refusal of
// the key, or a ban, refuses it locally for a second at most, then asks
// Redis again (see Options.NoRefusalCache); one that holds a lease of the
// key (Options.Lease) spends what is left of it until it ends.
func (s *Store) Reset(ctx context.Context, p *ratelimit.Policy, key string) error {
	var reply any
	bucket := s.key(ratelimit.Request{Policy: p, Key: key})
	keys, args := []string{bucket}, []any{"", "", 0, 0, 0}
	if mark, ok := s.markKey(bucket); ok {
		keys = append(keys, mark)
		span := markSpan(p)
		if s.now != nil {
			ns := s.now().UnixNano()
			args[0], args[1] = ns/1e9, ns%1e9
		}
		args[2], args[3], args[4] = span/1e9, span%1e9, span/1e6+1+markSlack
	}
	err := s.within(ctx, func(ctx context.Context) (err error) {
		reply, err = resetScript.Run(ctx, s.client, keys, args...).Result()
		return err
	})
	// After the DEL, so that an answer that came back before it does not
	// outlive the reset; even if the DEL failed, which costs the next
	// request a round trip at most.
	fp := fingerprint(s.seed, p.Name, key)
	if s.refusals != nil {
		s.refusals.forget(fp)
	}
	if s.leases != nil {
		s.leases.forget(fp)
	}
	if err != nil {
		return fmt.Errorf("redisstore: Reset: %w", err)
	}
	if n, ok := reply.(int64); !ok || n < 0 || n > 1 {
		return fmt.Errorf("redisstore: Reset: malformed reply %v", reply)
	}
	return nil
}

// forget drops what is left of the lease of the bucket fp, whose tokens
// came from the bucket before a reset; the key's next request goes to
// Redis. The key keeps its slot and the size of its next lease.
func (l *leases) forget(fp uint64) {
	e := &l.slots[fp%leaseSlots]
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fp == fp {
		e.until, e.left = 0, 0
	}
}
