package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/tokenfair/ratelimit"
)

var _ ratelimit.ResetStore = (*Store)(nil)

// resetScript forgets the state of a bucket (KEYS[1]) at the time ARGV 1
// and 2 ("" "" for the server's clock): the bucket is full, and what it
// still owed becomes credit (see take.lua), so that a give-back of a take
// made before the reset credits nothing; the key is kept as long as the
// credit lasts, and deleted when there is none. Leases of the bucket are
// forgotten with it. A script like every other call of the store, so that
// it runs on any redis.Scripter and goes to the key's node on a Cluster.
var resetScript = redis.NewScript(`
local G = 1000000000
local stored = redis.call("GET", KEYS[1])
if not stored then
  return 0
end
local s, n, rest = string.match(stored, "^(%d+):(%d+)(.*)$")
if not s then
  return redis.error_reply("ERR malformed rate-limit state in " .. KEYS[1])
end
local cS, cN = 0, 0
local a, b = string.match(rest, "^;(%d+):(%d+)")
if a then
  cS, cN = tonumber(a), tonumber(b)
end
local nowS, nowN = tonumber(ARGV[1]), tonumber(ARGV[2])
if not nowS then
  local t = redis.call("TIME")
  nowS, nowN = tonumber(t[1]), tonumber(t[2]) * 1000
end
-- what the bucket owed (its state, less now), or how long it has been full
local dS, dN = tonumber(s) - nowS, tonumber(n) - nowN
if dN < 0 then
  dS, dN = dS - 1, dN + G
end
cS, cN = cS + dS, cN + dN
if cN >= G then
  cS, cN = cS + 1, cN - G
end
if cS > 9223372036 or (cS == 9223372036 and cN > 854775807) then
  cS, cN = 9223372036, 854775807 -- an int64 of nanoseconds at most
end
if cS < 0 or (cS == 0 and cN == 0) then
  redis.call("DEL", KEYS[1])
  return 1
end
local ms = cS * 1000 + math.ceil(cN / 1000000) + tonumber(ARGV[3])
redis.call("SET", KEYS[1], string.format("%d:%d;%d:%d", nowS, nowN, cS, cN), "PX", ms)
return 1
`)

// Reset implements [ratelimit.ResetStore] in one round trip: key's bucket
// under p is full again, the tokens leased from it forgotten, and what this
// instance's refusal cache and lease knew of it dropped. Resetting a bucket
// that Redis does not hold is not an error. Other instances are not told:
// one that holds a refusal of the key (or a ban) refuses it locally for a
// second at most, one that holds a lease of it spends what is left.
func (s *Store) Reset(ctx context.Context, p *ratelimit.Policy, key string) error {
	var reply any
	args := []any{"", "", 0}
	if s.now != nil {
		ns := s.now().UnixNano()
		args = []any{ns / 1e9, ns % 1e9, slackMs} // kept as long as take.lua keeps a key on the caller's clock
	}
	keys := []string{s.key(ratelimit.BatchItem{Policy: p, Key: key})}
	err := s.within(ctx, func(ctx context.Context) (err error) {
		reply, err = resetScript.Run(ctx, s.client, keys, args...).Result()
		return err
	})
	// After the reset, so that an answer that came back before it does not
	// outlive it; even if the reset failed, which costs the next request a
	// round trip at most.
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

// slackMs is take.lua's SLACK: how much longer a key decided on the
// caller's clock is kept than its information lasts, in ms.
const slackMs = 10000
