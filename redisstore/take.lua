-- One rate-limit decision, atomically, for one key.
--
-- Times and spans are pairs of whole seconds and nanoseconds ("s:n"),
-- because Lua numbers are doubles and a Unix time in nanoseconds does not
-- fit in one exactly. Pairs are only added, subtracted and compared, which
-- is exact for any time this library can produce.
--
-- KEYS[1]  the bucket's key; its value is the state, a time "s:n"
-- ARGV[1]  "gcra" (token bucket, leaky policing) or "shape" (leaky shaping)
-- ARGV[2]  the increment, cost × interval
-- ARGV[3]  the bound: for gcra the depth burst × interval, for shape the
--          longest admissible wait
-- ARGV[4]  now, or "" to read the Redis server's clock (TIME)
--
-- Returns {allowed (0 or 1), state s, state n, now s, now n}: the state
-- before the decision ({0, 0} for a new key) and the time it was made at,
-- from which the caller computes the rest of the result.

local G = 1000000000

local function pair(v)
  local s, n = string.match(v, "^(%d+):(%d+)$")
  return {tonumber(s), tonumber(n)}
end

local function add(a, b)
  local s, n = a[1] + b[1], a[2] + b[2]
  if n >= G then
    return {s + 1, n - G}
  end
  return {s, n}
end

local function sub(a, b)
  local s, n = a[1] - b[1], a[2] - b[2]
  if n < 0 then
    return {s - 1, n + G}
  end
  return {s, n}
end

local function le(a, b)
  return a[1] < b[1] or (a[1] == b[1] and a[2] <= b[2])
end

local now
if ARGV[4] == "" then
  local t = redis.call("TIME")
  now = {tonumber(t[1]), tonumber(t[2]) * 1000}
else
  now = pair(ARGV[4])
end

local state = {0, 0}
local stored = redis.call("GET", KEYS[1])
if stored then
  state = pair(stored)
end

local start = state
if le(state, now) then
  start = now
end
local inc, bound = pair(ARGV[2]), pair(ARGV[3])
local after = add(start, inc)

local allowed
if inc[1] == 0 and inc[2] == 0 then
  allowed = true -- a cost of 0 only reads
elseif ARGV[1] == "shape" then
  allowed = le(sub(start, now), bound)
else
  allowed = le(sub(after, now), bound)
end

if allowed and not le(after, start) then
  -- Keep the key exactly as long as it carries information: until the new
  -- state, rounded up to the millisecond.
  local left = sub(after, now)
  local ttl = left[1] * 1000 + math.ceil(left[2] / 1000000)
  redis.call("SET", KEYS[1], string.format("%d:%d", after[1], after[2]), "PX", ttl)
end

return {allowed and 1 or 0, state[1], state[2], now[1], now[2]}
