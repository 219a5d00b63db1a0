-- Rate-limit decisions for one or more keys, atomically, all or nothing.
--
-- Times and spans are pairs of whole seconds and nanoseconds ("s:n"),
-- because Lua numbers are doubles and a Unix time in nanoseconds does not
-- fit in one exactly. Pairs are only added, subtracted and compared, which
-- is exact for any time this library can produce.
--
-- KEYS[i]        a bucket; its value is its state, a time "s:n"
-- ARGV[1]        now, or "" to read the Redis server's clock (TIME)
-- ARGV[3i-1]     for KEYS[i]: "gcra" (token bucket, leaky policing),
--                "shape" (leaky shaping) or "refund" (give back tokens)
-- ARGV[3i]       the increment, cost × interval (for refund, what to give back)
-- ARGV[3i+1]     the bound: for gcra the depth burst × interval, for shape
--                the longest admissible wait; unused for refund
--
-- Every key is decided at the same instant. The new states are written only
-- if every key allows; a key is kept exactly as long as it carries
-- information (until its state, rounded up to the millisecond).
--
-- Returns {now s, now n, then per key: allowed (0 or 1), state s, state n}
-- with each key's state before the decision ({0, 0} for a new key).

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
if ARGV[1] == "" then
  local t = redis.call("TIME")
  now = {tonumber(t[1]), tonumber(t[2]) * 1000}
else
  now = pair(ARGV[1])
end

local reply = {now[1], now[2]}
local after = {}
local all = true
for i, key in ipairs(KEYS) do
  local kind, inc, bound = ARGV[3 * i - 1], pair(ARGV[3 * i]), pair(ARGV[3 * i + 1])
  local state = {0, 0}
  local stored = redis.call("GET", key)
  if stored then
    state = pair(stored)
  end
  local allowed = true
  if kind == "refund" then
    after[i] = state
    if not le(state, now) then
      after[i] = sub(state, inc)
    end
  else
    local start = state
    if le(state, now) then
      start = now
    end
    after[i] = add(start, inc)
    if inc[1] == 0 and inc[2] == 0 then
      after[i] = state -- a cost of 0 only reads
    elseif kind == "shape" then
      allowed = le(sub(start, now), bound)
    else
      allowed = le(sub(after[i], now), bound)
    end
  end
  all = all and allowed
  reply[#reply + 1] = allowed and 1 or 0
  reply[#reply + 1] = state[1]
  reply[#reply + 1] = state[2]
end

if all then
  for i, key in ipairs(KEYS) do
    if le(after[i], now) then
      redis.call("DEL", key)
    else
      local left = sub(after[i], now)
      redis.call("SET", key, string.format("%d:%d", after[i][1], after[i][2]), "PX",
        left[1] * 1000 + math.ceil(left[2] / 1000000))
    end
  end
end

return reply
