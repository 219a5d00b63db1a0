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
-- numbers (no string to parse).
--
-- A bucket's value is its state, the time "s:n" at which it is full again,
-- then, when tokens were given back to it, ";" and its credit "s:n", the
-- span given back since the bucket was last forgotten, and for each of the
-- last takes given back (NL at most) "/" and its until and what was given
-- back of it, "s:n:s:n" (see "refund"); and with leases outstanding (see
-- below) ":L:E:" and K pairs, the rooms of the last K epochs, newest first.
--
-- Credit. A give-back credits only what its take still costs the bucket:
-- until - credit + later - now, where until is the take's state plus the
-- credit then (the Result's Until: the client adds the credit this script
-- returns) and later what was given back of the takes after it (of those
-- the bucket remembers): the spans given back since of the takes before
-- it moved it earlier, and are not credited twice. The credit only grows,
-- but for the time the bucket spends full, by which it shrinks; a key is
-- kept until its state plus its credit has passed.
--
-- Leases. An instance may take several tokens at once (a lease) and spend
-- them locally for L milliseconds at most. Tokens held in a lease are out
-- of the bucket but not yet spent, so the bucket must not refill into
-- their room meanwhile: while a lease is outstanding the bucket holds at
-- most burst - (tokens leased), that is the state is at least the leased
-- span ahead of now. The leased spans are counted per epoch of L ms (epoch
-- E = floor(now / L)), for the last K epochs: room[1] for leases granted in
-- epoch E, room[2] for epoch E - 1, and so on. A lease granted in epoch E
-- ends by the end of epoch E + 1, and its room is kept until it goes back
-- or until the end of epoch E + K - 1, so that an instance that gives its
-- lease back a little late (with the key's next request) still gets what
-- is left of it back into the bucket; a lease that is never returned (its
-- instance died) stops counting K epochs later at most.
--
-- KEYS       the buckets of every group, group after group
-- ARGV       group after group: m, the number of its keys; now (a pair),
--            or "", "" to read the Redis server's clock (TIME, read once
--            for the whole call); then, for each of its m keys, a kind and
--            its arguments:
--              "gcra"   inc bound: token bucket, leaky policing; inc is
--                       cost × interval, bound the depth burst × interval
--              "shape"  inc bound: leaky shaping; bound is the longest
--                       admissible wait
--              "refund" inc until: give back inc (a pair), but no more
--                       than until − credit − now (until: the take's
--                       Result.Until), and never to before now
--              "lease"  inc bound want L: like gcra, but take want (a
--                       pair, ≥ inc) if the bucket has it, as a lease of
--                       L ms; else inc alone, as gcra would
--              "return" inc span E: give back inc, the unspent part of a
--                       lease granted in epoch E whose whole span was span,
--                       if its room is still kept (else nothing is given
--                       back: the bucket may have refilled into it)
--              "ban"    inc bound: a penalty box's ban, whose state is the
--                       time it ends; refused while banned, and then
--                       unchanged; else inc 0 asks, and a positive inc
--                       bans for inc from now; bound is unused
--
-- Every key of a group is decided at the same instant. A group's new
-- states are written only if every key allows; a key is kept exactly as
-- long as it carries information (until its state, or its leases' epochs
-- end, rounded up to the millisecond).
--
-- Returns one element per group: an error ({err = ...}) when one of its
-- keys cannot be read (a key of another type, say; the group then changes
-- nothing), else, per key: allowed (0 or 1, or for a granted lease 2 + E,
-- its epoch), then how far the key's state was ahead of now before the
-- decision, leases counted, a pair (0, 0 for a full bucket, an empty queue
-- or a new key), then its credit after the decision, a pair; and last the
-- group's now, a pair. The decision depends on nothing else, so the client
-- can compute the whole result from it.

local G = 1000000000

local function add(aS, aN, bS, bN)
  local s, n = aS + bS, aN + bN
  if n >= G then
    s, n = s + 1, n - G
  end
  return s, n
end

local function sub(aS, aN, bS, bN)
  local s, n = aS - bS, aN - bN
  if n < 0 then
    s, n = s - 1, n + G
  end
  return s, n
end

local function le(aS, aN, bS, bN)
  return aS < bS or (aS == bS and aN <= bN)
end

local function positive(s, n)
  return s > 0 or (s == 0 and n > 0)
end

-- the number of arguments of a key of kind
local function stride(kind)
  if kind == "lease" then
    return 8
  elseif kind == "return" then
    return 6
  end
  return 5
end

local K = 4 -- the epochs a lease's room is kept
local NL = 4 -- the takes given back that a bucket remembers

-- Redis expires keys on its own clock. A key decided on the caller's clock
-- (Options.Clock) is kept this many ms longer than its information lasts,
-- since that clock may run behind Redis's: a key that expired early would
-- be a full bucket too soon. Keeping a key longer changes no decision.
local SLACK = 10000

local clock -- the server's time, once read

local reply = {}
local nextS, nextN, lease = {}, {}, {} -- a group's new states, before they are written
local k, j = 0, 1 -- before the group's first key; at its first argument
while j <= #ARGV do
  local m = tonumber(ARGV[j])
  local nowS, nowN
  local slack = 0
  if ARGV[j + 1] == "" then
    if not clock then
      local t = redis.call("TIME")
      clock = {tonumber(t[1]), tonumber(t[2]) * 1000}
    end
    nowS, nowN = clock[1], clock[2]
  else
    nowS, nowN = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
    slack = SLACK
  end
  local nowMs = nowS * 1000 + math.floor(nowN / 1000000)
  j = j + 3

  local out = {}
  local all, failed, read = true, nil, 0
  for i = 1, m do
    local kind = ARGV[j]
    local incS, incN = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
    -- d: how far the state is ahead of now (0, 0 when it is not).
    local dS, dN = 0, 0
    -- the leases outstanding: their epochs' length L (0: none), the
    -- current epoch E, and room[i], the span leased in epoch E - i + 1.
    local L, E = 0, 0
    local roomS, roomN = {}, {}
    for r = 1, K do
      roomS[r], roomN[r] = 0, 0
    end
    -- c: the bucket's credit, and later what it remembers of the takes
    -- given back: until, given, each a pair
    local cS, cN = 0, 0
    local later = {}
    local stored = redis.pcall("GET", KEYS[k + i])
    if type(stored) == "table" then
      failed = stored
      break
    end
    if stored then
      local s, n, rest = string.match(stored, "^(%d+):(%d+)(.*)$")
      if s and string.sub(rest, 1, 1) == ";" then
        local a, b, tail = string.match(rest, "^;(%d+):(%d+)(.*)$")
        if a then
          cS, cN, rest = tonumber(a), tonumber(b), tail
          while s and string.sub(rest, 1, 1) == "/" and #later < 4 * NL do
            local w, x, y, z, more = string.match(rest, "^/(%d+):(%d+):(%d+):(%d+)(.*)$")
            if not w then
              s = nil
            else
              -- a take whose until has passed, and those before it, can get
              -- nothing back: forgotten
              if not le(tonumber(w), tonumber(x), nowS, nowN) then
                later[#later + 1], later[#later + 2] = tonumber(w), tonumber(x)
                later[#later + 1], later[#later + 2] = tonumber(y), tonumber(z)
              end
              rest = more
            end
          end
        else
          s = nil
        end
      end
      if s and rest ~= "" then
        local v = {}
        for x in string.gmatch(rest, ":(%d+)") do
          v[#v + 1] = tonumber(x)
        end
        if #v ~= 2 + 2 * K or string.match(rest, "^[:%d]+$") == nil or v[1] == 0 then
          s = nil
        else
          L = v[1]
          E = math.floor(nowMs / L)
          local shift = E - v[2] -- epochs since the state was written
          for r = 1, K do
            local from = r - shift
            if from >= 1 and from <= K then
              roomS[r], roomN[r] = v[1 + 2 * from], v[2 + 2 * from]
            end
          end
        end
      end
      if not s then
        failed = {err = "ERR malformed rate-limit state in " .. KEYS[k + i]}
        break
      end
      dS, dN = sub(tonumber(s), tonumber(n), nowS, nowN)
      if dS < 0 then
        -- Full since then: the credit shrinks by that time.
        local fS, fN = sub(nowS, nowN, tonumber(s), tonumber(n))
        cS, cN = sub(cS, cN, fS, fN)
        if cS < 0 then
          cS, cN = 0, 0
        end
        -- the takes remembered get nothing back, and the untils of those to
        -- come may be smaller
        later = {}
        dS, dN = 0, 0
      end
    end
    -- The bucket holds no more than burst minus the leased tokens.
    local heldS, heldN = 0, 0
    for r = 1, K do
      heldS, heldN = add(heldS, heldN, roomS[r], roomN[r])
    end
    if not le(heldS, heldN, dS, dN) then
      dS, dN = heldS, heldN
    end
    -- a: the new state's distance from now, which may be negative (a
    -- refund that empties the bucket).
    local aS, aN = dS, dN
    local allowed = 1
    if kind == "refund" or kind == "return" then
      if kind == "return" then
        local spanS, spanN, e = tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4]), tonumber(ARGV[j + 5])
        local r = E - e + 1
        if L > 0 and r >= 1 and r <= K then
          roomS[r], roomN[r] = sub(roomS[r], roomN[r], spanS, spanN)
          if roomS[r] < 0 then
            roomS[r], roomN[r] = 0, 0
          end
        else
          -- The lease's room is no longer kept (its epochs are over, or
          -- the key was reset): the bucket may have refilled into it, so
          -- what is left of the lease is lost, not given back.
          incS, incN = 0, 0
        end
      end
      local tS, tN -- the take's until, for a refund
      if kind == "refund" then
        -- no more than until - credit + later - now: what the take still
        -- costs
        tS, tN = tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4])
        local uS, uN = sub(tS, tN, cS, cN)
        for q = 1, #later, 4 do
          if not le(later[q], later[q + 1], tS, tN) then
            uS, uN = add(uS, uN, later[q + 2], later[q + 3])
          end
        end
        uS, uN = sub(uS, uN, nowS, nowN)
        if not positive(uS, uN) then
          incS, incN = 0, 0
        elseif le(uS, uN, incS, incN) then
          incS, incN = uS, uN
        end
      end
      -- never to before now; what is given back adds to the credit
      if not le(incS, incN, dS, dN) then
        incS, incN = dS, dN
      end
      aS, aN = sub(dS, dN, incS, incN)
      cS, cN = add(cS, cN, incS, incN)
      if tS and positive(incS, incN) then
        -- remember it, in place of the take with the smallest until
        local keep = {}
        for q = 1, #later, 4 do
          keep[#keep + 1] = {later[q], later[q + 1], later[q + 2], later[q + 3]}
        end
        table.sort(keep, function(x, y) return not le(x[1], x[2], y[1], y[2]) end)
        later = {tS, tN, incS, incN}
        for q = 1, math.min(#keep, NL - 1) do
          for r = 1, 4 do
            later[#later + 1] = keep[q][r]
          end
        end
      end
    elseif kind == "ban" then
      if positive(dS, dN) then
        allowed = 0 -- banned: neither asked past nor replaced
      elseif positive(incS, incN) then
        aS, aN = incS, incN
      end
    elseif positive(incS, incN) then -- a cost of 0 only reads
      local bS, bN = tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4])
      if kind == "lease" then
        local wS, wN, l = tonumber(ARGV[j + 5]), tonumber(ARGV[j + 6]), tonumber(ARGV[j + 7])
        local tS, tN = add(dS, dN, wS, wN)
        -- A lease needs the bucket's room and the same epochs as the
        -- leases already outstanding.
        if le(tS, tN, bS, bN) and (L == l or not positive(heldS, heldN)) then
          if L ~= l then
            L = l
            E = math.floor(nowMs / L)
            for r = 1, K do
              roomS[r], roomN[r] = 0, 0
            end
          end
          aS, aN = tS, tN
          roomS[1], roomN[1] = add(roomS[1], roomN[1], wS, wN)
          allowed = 2 + E
        end
      end
      if allowed == 1 then
        aS, aN = add(dS, dN, incS, incN)
        -- shaping bounds the wait before the request, policing the depth
        -- after it.
        if kind == "shape" then
          allowed = le(dS, dN, bS, bN) and 1 or 0
        else
          allowed = le(aS, aN, bS, bN) and 1 or 0
        end
      end
    end
    nextS[i], nextN[i] = aS, aN
    lease[i] = {L, E, roomS, roomN, cS, cN, later}
    all = all and allowed > 0
    out[5 * i - 4] = allowed
    out[5 * i - 3] = dS
    out[5 * i - 2] = dN
    out[5 * i - 1] = cS
    out[5 * i] = cN
    j = j + stride(kind)
    read = i
  end

  if failed then
    -- skip the arguments of the keys not read
    for _ = read + 1, m do
      j = j + stride(ARGV[j])
    end
    reply[#reply + 1] = failed
  else
    if all then
      for i = 1, m do
        local key, aS, aN = KEYS[k + i], nextS[i], nextN[i]
        local L, E, roomS, roomN, cS, cN, later = unpack(lease[i])
        if not positive(aS, aN) then
          aS, aN = 0, 0
        end
        -- how long the key carries information: its state plus its credit
        local wS, wN = add(aS, aN, cS, cN)
        local ms = 0
        if positive(wS, wN) then
          ms = wS * 1000 + math.ceil(wN / 1000000)
        end
        local tail = ""
        if positive(cS, cN) then
          tail = string.format(";%d:%d", cS, cN)
          for q = 1, #later, 4 do
            tail = tail .. string.format("/%d:%d:%d:%d", later[q], later[q + 1], later[q + 2], later[q + 3])
          end
        end
        for r = 1, K do
          if positive(roomS[r], roomN[r]) then
            -- the room of epoch E - r + 1 is kept to the end of epoch E - r + K
            ms = math.max(ms, (E - r + K + 1) * L - nowMs)
            tail = tail .. string.format(":%d:%d", L, E)
            for q = 1, K do
              tail = tail .. string.format(":%d:%d", roomS[q], roomN[q])
            end
            break
          end
        end
        if ms == 0 then
          redis.call("DEL", key)
        else
          local s, n = add(nowS, nowN, aS, aN)
          redis.call("SET", key, string.format("%d:%d", s, n) .. tail, "PX", ms + slack)
        end
      end
    end
    out[#out + 1] = nowS
    out[#out + 1] = nowN
    reply[#reply + 1] = out
  end
  -- j already points past the group's arguments
  k = k + m
end

return reply
