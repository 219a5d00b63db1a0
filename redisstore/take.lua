-- Rate-limit decisions, in groups: each group of keys is decided atomically,
-- all or nothing; groups are independent of one another. A lone decision
-- is one group; concurrent decisions batched together are one group each,
-- so that the fixed cost of a script call (and of TIME) is paid once for
-- all of them.
--
-- Times and spans are pairs of whole seconds and nanoseconds, because Lua
-- numbers are doubles and a Unix time in nanoseconds does not fit in one
-- exactly. Pairs are only added, subtracted and compared, which is exact
-- for any time this library can produce. In the arguments a pair is two
-- numbers (no string to parse); a stored state is the string "s:n".
--
-- KEYS       the buckets of every group, group after group; a bucket's
--            value is its state, a time "s:n"
-- ARGV       group after group: m, the number of its keys; now (a pair),
--            or "", "" to read the Redis server's clock (TIME, read once
--            for the whole call); then, for each of its m keys:
--              kind   "gcra" (token bucket, leaky policing), "shape" (leaky
--                     shaping) or "refund" (give back tokens)
--              the increment, cost × interval (for refund, what to give
--                     back), a pair
--              the bound, a pair: for gcra the depth burst × interval, for
--                     shape the longest admissible wait; unused for refund
--
-- Every key of a group is decided at the same instant. A group's new
-- states are written only if every key allows; a key is kept exactly as
-- long as it carries information (until its state, rounded up to the
-- millisecond).
--
-- Returns one element per group: an error ({err = ...}) when one of its
-- keys cannot be read (a key of another type, say; the group then changes
-- nothing), else, per key: allowed (0 or 1), then how far the key's state
-- was ahead of now before the decision, a pair (0, 0 for a full bucket, an
-- empty queue or a new key). The decision depends on nothing else, so the
-- client can compute the whole result from it.

local G = 1000000000

local clock -- the server's time, once read

local reply = {}
local nextS, nextN = {}, {} -- a group's new states, before they are written
local k, j = 0, 1 -- before the group's first key; at its first argument
while j <= #ARGV do
  local m = tonumber(ARGV[j])
  local nowS, nowN
  if ARGV[j + 1] == "" then
    if not clock then
      local t = redis.call("TIME")
      clock = {tonumber(t[1]), tonumber(t[2]) * 1000}
    end
    nowS, nowN = clock[1], clock[2]
  else
    nowS, nowN = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
  end
  j = j + 3

  local out = {}
  local all, failed = true, nil
  for i = 1, m do
    local a = j + 5 * (i - 1)
    local kind = ARGV[a]
    local incS, incN = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    -- d: how far the state is ahead of now (0, 0 when it is not).
    local dS, dN = 0, 0
    local stored = redis.pcall("GET", KEYS[k + i])
    if type(stored) == "table" then
      failed = stored
      break
    end
    if stored then
      local s, n = string.match(stored, "^(%d+):(%d+)$")
      if not s then
        failed = {err = "ERR malformed rate-limit state in " .. KEYS[k + i]}
        break
      end
      dS, dN = tonumber(s) - nowS, tonumber(n) - nowN
      if dN < 0 then
        dS, dN = dS - 1, dN + G
      end
      if dS < 0 then
        dS, dN = 0, 0
      end
    end
    -- a: the new state's distance from now, which may be negative (a
    -- refund that empties the bucket).
    local aS, aN = dS, dN
    local allowed = true
    if kind == "refund" then
      if dS > 0 or dN > 0 then
        aS, aN = dS - incS, dN - incN
      end
    elseif incS > 0 or incN > 0 then -- a cost of 0 only reads
      aS, aN = dS + incS, dN + incN
      if aN >= G then
        aS, aN = aS + 1, aN - G
      end
      -- shaping bounds the wait before the request, policing the depth
      -- after it.
      local wS, wN = aS, aN
      if kind == "shape" then
        wS, wN = dS, dN
      end
      local bS, bN = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
      allowed = wS < bS or (wS == bS and wN <= bN)
    end
    if aN < 0 then
      aS, aN = aS - 1, aN + G
    end
    nextS[i], nextN[i] = aS, aN
    all = all and allowed
    out[3 * i - 2] = allowed and 1 or 0
    out[3 * i - 1] = dS
    out[3 * i] = dN
  end

  if failed then
    reply[#reply + 1] = failed
  else
    if all then
      for i = 1, m do
        local key, aS, aN = KEYS[k + i], nextS[i], nextN[i]
        if aS < 0 or (aS == 0 and aN == 0) then
          redis.call("DEL", key)
        else
          local s, n = nowS + aS, nowN + aN
          if n >= G then
            s, n = s + 1, n - G
          end
          redis.call("SET", key, string.format("%d:%d", s, n), "PX", aS * 1000 + math.ceil(aN / 1000000))
        end
      end
    end
    reply[#reply + 1] = out
  end
  k, j = k + m, j + 5 * m
end

return reply
