-- Takes one of ARGV[1] in-flight slots of KEYS[1], a sorted set of tokens
-- scored by the end of their lease in milliseconds, for the token ARGV[3],
-- or renews the lease of the slot it holds. Expired leases are dropped
-- first, so the slots of a crashed instance come back on their own.
--
-- ARGV[1] limit, ARGV[2] lease in ms, ARGV[3] token, ARGV[4] now in ms or ""
-- to read the Redis server's clock. Returns 1 when the token holds a slot,
-- else 0.

local now, slack = nil, 0
if ARGV[4] == "" then
  local t = redis.call("TIME")
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[4])
  -- Redis expires keys on its own clock, which the caller's may run behind
  -- (take.lua's SLACK): keep the set 10 s longer. The scores still decide.
  slack = 10000
end
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
if not redis.call("ZSCORE", KEYS[1], ARGV[3]) and redis.call("ZCARD", KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
local lease = tonumber(ARGV[2])
redis.call("ZADD", KEYS[1], now + lease, ARGV[3])
-- The set lives until its last lease ends, whichever instance set it: an
-- instance with a shorter SlotLease must not expire the others' slots.
if redis.call("PTTL", KEYS[1]) < lease + slack then
  redis.call("PEXPIRE", KEYS[1], lease + slack)
end
return 1
