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
-- takes given back (NL at most, the closest kept as one) "/" and its until
-- and what was given back of it, "s:n:s:n" (see "refund"); and with leases outstanding (see
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
--              "debt"   inc bound: a charge past empty, always allowed:
--                       the state moves on by inc, exactly (to the
--                       farthest time an int64 holds at most), and never
--                       back; a calendar quota's "quota-debt" moves it to
--                       2 × bound past its period's end at most, so that
--                       the debt ends at the reset
--              "quota", "quota-debt", "quota-refund"
--                       inc bound-or-until end next: a calendar quota's
--                       "gcra", "debt" and "refund", with inc cost × 1 ns
--                       and bound n × 1 ns for a quota of n, decided at
--                       the end of its period instead of now: end (a
--                       pair), that of the period holding the caller's
--                       now, while now is before it, else next (a pair),
--                       the next period's end. Its state is that end plus
--                       the tokens spent in the period, so that the
--                       bucket is full again once now reaches the end.
--
-- A state however far ahead of now (a debt, one kept under a longer limit
-- than the one given, or before the clock went back) counts as it is, as
-- the algorithm counts it: nothing is forgiven.
--
-- Every key of a group is decided at the same instant (a calendar quota's
-- at its period's end). A group's new states are written only if every
-- key allows; a key is kept exactly as long as it carries information
-- (until its state, or its leases' epochs end, rounded up to the
-- millisecond, from now).
--
-- Returns one element per group: an error ({err = ...}) when one of its
-- keys cannot be read (a key of another type, say; the group then changes
-- nothing), else, per key: allowed (0 or 1, or for a granted lease 2 + E,
-- its epoch), then how far the key's state was ahead of now (a calendar
-- quota's: of its period's end) before the decision, leases counted, a
-- pair (0, 0 for a full bucket, an empty queue or a new key), then its
-- credit after the decision, a pair; and last the group's now, a pair. The
-- decision depends on nothing else, so the client can compute the whole
-- result from it.

local G = 1000000000
-- the farthest time an int64 of nanoseconds holds, 2^63 - 1, a pair
local MAXS, MAXN = 9223372036, 854775807
local K = 4 -- the epochs a lease's room is kept
local NL = 8 -- the takes given back that a bucket remembers

-- Redis expires keys on its own clock. A key decided on the caller's clock
-- (Options.Clock) is kept this many ms longer than its information lasts,
-- since that clock may run behind Redis's: a key that expired early would
-- be a full bucket too soon. Keeping a key longer changes no decision.
local SLACK = 10000

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

-- A calendar quota's kinds, and the kind each is decided as, at the end of
-- the quota's period.
local QUOTA = {quota = "gcra", ["quota-debt"] = "debt", ["quota-refund"] = "refund"}

-- the number of arguments of a key of kind
local function stride(kind)
  if kind == "lease" then
    return 8
  elseif kind == "return" then
    return 6
  elseif QUOTA[kind] then
    return 9
  end
  return 5
end

-- periodEnd returns the time at which the calendar quota whose arguments
-- start at ARGV[j] is decided: the end of the caller's period while now is
-- before it, else the next period's end.
local function periodEnd(j, nowS, nowN)
  local s, n = tonumber(ARGV[j + 5]), tonumber(ARGV[j + 6])
  if le(s, n, nowS, nowN) then
    return tonumber(ARGV[j + 7]), tonumber(ARGV[j + 8])
  end
  return s, n
end

-- A key's state while its group is decided, a table:
--   dS, dN   how far the state is ahead of now, leases counted (0, 0 when
--            it is not); the decision's starting point, and what the reply
--            reports
--   aS, aN   once decided, the new state's distance from now, which may be
--            negative (a refund that empties the bucket)
--   cS, cN   the bucket's credit
--   later    what the bucket remembers of the takes given back: until,
--            given, each a pair, 4 numbers a take (nil: none)
--   L, E     the leases' epochs' length (0: no lease) and the current epoch
--   room     the spans leased in epochs E, E - 1, …: room[2r - 1],
--            room[2r] for epoch E - r + 1 (nil: none)
--   hS, hN   the sum of room: the span the bucket must not refill into

local clock -- the server's time, once read

-- now returns a group's now from its pair of arguments s, n, and how much
-- longer than its information a key is kept (see SLACK).
local function now(s, n)
  if s ~= "" then
    return tonumber(s), tonumber(n), SLACK
  end
  if not clock then
    local t = redis.call("TIME")
    clock = {tonumber(t[1]), tonumber(t[2]) * 1000}
  end
  return clock[1], clock[2], 0
end

-- readGiveBacks reads into st the credit and the takes given back at the
-- start of rest (";" credit, then "/" until given, each at most NL times),
-- forgetting the takes whose until is not after now: they, and those before
-- them, can get nothing back. It returns the rest, or nil when malformed.
local function readGiveBacks(st, rest, nowS, nowN)
  local a, b, tail = string.match(rest, "^;(%d+):(%d+)(.*)$")
  if not a then
    return nil
  end
  st.cS, st.cN, rest = tonumber(a), tonumber(b), tail
  local later = {}
  while string.sub(rest, 1, 1) == "/" and #later < 4 * NL do
    local w, x, y, z, more = string.match(rest, "^/(%d+):(%d+):(%d+):(%d+)(.*)$")
    if not w then
      return nil
    end
    w, x = tonumber(w), tonumber(x)
    if not le(w, x, nowS, nowN) then
      later[#later + 1], later[#later + 2] = w, x
      later[#later + 1], later[#later + 2] = tonumber(y), tonumber(z)
    end
    rest = more
  end
  st.later = later
  return rest
end

-- readRoom reads into st the leases of rest (":L:E" and K pairs), moved on
-- to the current epoch. It reports whether rest is well formed.
local function readRoom(st, rest, nowMs)
  local v = {}
  for x in string.gmatch(rest, ":(%d+)") do
    v[#v + 1] = tonumber(x)
  end
  if #v ~= 2 + 2 * K or string.match(rest, "^[:%d]+$") == nil or v[1] == 0 then
    return false
  end
  local L = v[1]
  local E = math.floor(nowMs / L)
  local shift = E - v[2] -- epochs since the state was written
  local room = {}
  for r = 1, K do
    local from = r - shift
    if from >= 1 and from <= K then
      room[2 * r - 1], room[2 * r] = v[1 + 2 * from], v[2 + 2 * from]
    else
      room[2 * r - 1], room[2 * r] = 0, 0
    end
  end
  st.L, st.E, st.room = L, E, room
  return true
end

-- read returns the state of the bucket at key as of now, or nil and the
-- group's error reply when the key holds something else.
local function read(key, nowS, nowN, nowMs)
  local st = {dS = 0, dN = 0, cS = 0, cN = 0, L = 0, E = 0, hS = 0, hN = 0}
  local stored = redis.pcall("GET", key)
  if type(stored) == "table" then
    return nil, stored
  end
  if not stored then
    return st
  end
  local s, n, rest = string.match(stored, "^(%d+):(%d+)(.*)$")
  if s and string.sub(rest, 1, 1) == ";" then
    rest = readGiveBacks(st, rest, nowS, nowN)
  end
  if not s or not rest or rest ~= "" and not readRoom(st, rest, nowMs) then
    return nil, {err = "ERR malformed rate-limit state in " .. key}
  end
  local dS, dN = sub(tonumber(s), tonumber(n), nowS, nowN)
  if dS < 0 then
    -- Full since then: the credit shrinks by that time, the takes
    -- remembered get nothing back, and the untils of those to come may be
    -- smaller.
    local fS, fN = sub(nowS, nowN, tonumber(s), tonumber(n))
    local cS, cN = sub(st.cS, st.cN, fS, fN)
    if cS < 0 then
      cS, cN = 0, 0
    end
    st.cS, st.cN, st.later = cS, cN, nil
    dS, dN = 0, 0
  end
  -- The bucket holds no more than burst minus the leased tokens.
  local room = st.room
  if room then
    local hS, hN = 0, 0
    for r = 1, 2 * K, 2 do
      hS, hN = add(hS, hN, room[r], room[r + 1])
    end
    st.hS, st.hN = hS, hN
    if not le(hS, hN, dS, dN) then
      dS, dN = hS, hN
    end
  end
  st.dS, st.dN = dS, dN
  return st
end

-- giveBack gives inc back to st's bucket, but never to before now, and
-- adds it to the credit; it returns what it gave.
local function giveBack(st, incS, incN)
  if not le(incS, incN, st.dS, st.dN) then
    incS, incN = st.dS, st.dN
  end
  st.aS, st.aN = sub(st.dS, st.dN, incS, incN)
  st.cS, st.cN = add(st.cS, st.cN, incS, incN)
  if le(MAXS, MAXN, st.cS, st.cN) then
    st.cS, st.cN = MAXS, MAXN -- an int64 of nanoseconds at most
  end
  return incS, incN
end

-- refund gives back inc of the take whose Result.Until is t, but no more
-- than what the take still costs, t - credit + later - now, and remembers
-- it among the takes given back (NL at most: see below).
local function refund(st, incS, incN, tS, tN, nowS, nowN)
  local later = st.later or {}
  local uS, uN = sub(tS, tN, st.cS, st.cN)
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
  incS, incN = giveBack(st, incS, incN)
  if positive(incS, incN) then
    local keep = {{tS, tN, incS, incN}}
    for q = 1, #later, 4 do
      keep[#keep + 1] = {later[q], later[q + 1], later[q + 2], later[q + 3]}
    end
    table.sort(keep, function(x, y) return le(x[1], x[2], y[1], y[2]) and not le(y[1], y[2], x[1], x[2]) end)
    if #keep > NL then
      -- The two takes whose untils are closest are kept as one, at the
      -- smaller until: the takes between them get back less, never more.
      local m, gS, gN = 1, sub(keep[2][1], keep[2][2], keep[1][1], keep[1][2])
      for q = 2, #keep - 1 do
        local dS, dN = sub(keep[q + 1][1], keep[q + 1][2], keep[q][1], keep[q][2])
        if not le(gS, gN, dS, dN) then
          m, gS, gN = q, dS, dN
        end
      end
      keep[m][3], keep[m][4] = add(keep[m][3], keep[m][4], keep[m + 1][3], keep[m + 1][4])
      if le(MAXS, MAXN, keep[m][3], keep[m][4]) then
        keep[m][3], keep[m][4] = MAXS, MAXN
      end
      table.remove(keep, m + 1)
    end
    later = {}
    for q = 1, #keep do
      for r = 1, 4 do
        later[#later + 1] = keep[q][r]
      end
    end
    st.later = later
  end
  return 1
end

-- returnLease gives back inc, the unspent part of a lease granted in epoch
-- e whose whole span was span, if its room is still kept.
local function returnLease(st, incS, incN, spanS, spanN, e)
  local r = st.E - e + 1
  if st.L > 0 and r >= 1 and r <= K then
    local room = st.room
    room[2 * r - 1], room[2 * r] = sub(room[2 * r - 1], room[2 * r], spanS, spanN)
    if room[2 * r - 1] < 0 then
      room[2 * r - 1], room[2 * r] = 0, 0
    end
  else
    -- The lease's room is no longer kept (its epochs are over, or the key
    -- was reset): the bucket may have refilled into it, so what is left of
    -- the lease is lost, not given back.
    incS, incN = 0, 0
  end
  giveBack(st, incS, incN)
  return 1
end

-- ban decides a penalty box's ban: refused while banned (and then
-- unchanged), else inc 0 asks and a positive inc bans for inc from now.
local function ban(st, incS, incN)
  if positive(st.dS, st.dN) then
    return 0
  end
  if positive(incS, incN) then
    st.aS, st.aN = incS, incN
  end
  return 1
end

-- lease grants st a lease of want (a pair) in epochs of l ms, if the bucket
-- has its room under bound and the leases outstanding are of the same
-- epochs, and reports whether it did.
local function lease(st, wS, wN, l, bS, bN, nowMs)
  local tS, tN = add(st.dS, st.dN, wS, wN)
  if not le(tS, tN, bS, bN) or st.L ~= l and positive(st.hS, st.hN) then
    return false
  end
  if st.L ~= l or not st.room then
    st.L, st.E = l, math.floor(nowMs / l)
    st.room = {0, 0, 0, 0, 0, 0, 0, 0}
  end
  local room = st.room
  room[1], room[2] = add(room[1], room[2], wS, wN)
  st.aS, st.aN = tS, tN
  return true
end

-- owe takes inc from st past empty: the state moves on by inc, exactly,
-- but to no more than lim ahead (a pair), and never back. Always allowed.
local function owe(st, incS, incN, limS, limN)
  local aS, aN = add(st.dS, st.dN, incS, incN)
  if le(limS, limN, aS, aN) then
    aS, aN = limS, limN
  end
  if le(st.dS, st.dN, aS, aN) then
    st.aS, st.aN = aS, aN
  end
  return 1
end

-- decide decides st as a key of kind, whose arguments start at ARGV[j],
-- at now, and returns what it allowed (0, 1, or 2 + E for a lease granted
-- in epoch E).
local function decide(st, kind, j, nowS, nowN, nowMs)
  local incS, incN = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
  st.aS, st.aN = st.dS, st.dN
  if kind == "refund" then
    return refund(st, incS, incN, tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4]), nowS, nowN)
  elseif kind == "return" then
    return returnLease(st, incS, incN, tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4]), tonumber(ARGV[j + 5]))
  elseif kind == "ban" then
    return ban(st, incS, incN)
  elseif not positive(incS, incN) then
    return 1 -- a cost of 0 only reads
  end
  local bS, bN = tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4])
  if kind == "debt" then
    if ARGV[j] == "quota-debt" then
      return owe(st, incS, incN, add(bS, bN, bS, bN))
    end
    return owe(st, incS, incN, sub(MAXS, MAXN, nowS, nowN))
  end
  if kind == "lease" and lease(st, tonumber(ARGV[j + 5]), tonumber(ARGV[j + 6]), tonumber(ARGV[j + 7]), bS, bN, nowMs) then
    return 2 + st.E
  end
  local aS, aN = add(st.dS, st.dN, incS, incN)
  st.aS, st.aN = aS, aN
  -- shaping bounds the wait before the request, policing the depth after it.
  if kind == "shape" then
    aS, aN = st.dS, st.dN
  end
  return le(aS, aN, bS, bN) and 1 or 0
end

-- write stores st's new state at key, decided at vS, vN (now, or a
-- calendar quota's period end), kept exactly as long as it carries
-- information (until its state plus its credit, or its leases' epochs
-- end, rounded up to the millisecond, from now), or deletes the key when
-- it carries none.
local function write(key, st, vS, vN, nowS, nowN, nowMs, slack)
  local aS, aN = st.aS, st.aN
  if not positive(aS, aN) then
    aS, aN = 0, 0
  end
  local cS, cN = st.cS, st.cN
  local wS, wN = add(aS, aN, cS, cN)
  local ms = 0
  if positive(wS, wN) then
    wS, wN = add(wS, wN, sub(vS, vN, nowS, nowN))
    if positive(wS, wN) then
      ms = wS * 1000 + math.ceil(wN / 1000000)
    end
  end
  local tail = ""
  if positive(cS, cN) then
    tail = string.format(";%d:%d", cS, cN)
    local later = st.later or {}
    for q = 1, #later, 4 do
      tail = tail .. string.format("/%d:%d:%d:%d", later[q], later[q + 1], later[q + 2], later[q + 3])
    end
  end
  local room, L, E = st.room, st.L, st.E
  if room then
    for r = 1, K do
      if positive(room[2 * r - 1], room[2 * r]) then
        -- the room of epoch E - r + 1 is kept to the end of epoch E - r + K
        ms = math.max(ms, (E - r + K + 1) * L - nowMs)
        tail = tail .. string.format(":%d:%d", L, E)
        for q = 1, 2 * K, 2 do
          tail = tail .. string.format(":%d:%d", room[q], room[q + 1])
        end
        break
      end
    end
  end
  if ms == 0 then
    redis.call("DEL", key)
  else
    local s, n = add(vS, vN, aS, aN)
    redis.call("SET", key, string.format("%d:%d", s, n) .. tail, "PX", ms + slack)
  end
end

-- plain decides a group of one key of kind "gcra" or "shape" whose bucket
-- holds a plain state (no credit, no leases: most keys, most of the time)
-- as group would, in fewer steps. For any other key it returns nil, having
-- changed nothing.
local function plain(key, j, nowS, nowN, slack)
  local kind = ARGV[j]
  if kind ~= "gcra" and kind ~= "shape" then
    return nil
  end
  local dS, dN = 0, 0
  local stored = redis.pcall("GET", key)
  if stored then
    local s, n = string.match(type(stored) == "string" and stored or "", "^(%d+):(%d+)$")
    if not s then
      return nil
    end
    dS, dN = sub(tonumber(s), tonumber(n), nowS, nowN)
    if dS < 0 then
      dS, dN = 0, 0
    end
  end
  local incS, incN = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
  local bS, bN = tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4])
  local aS, aN = add(dS, dN, incS, incN)
  local allowed = 1
  if positive(incS, incN) then
    if kind == "shape" then
      allowed = le(dS, dN, bS, bN) and 1 or 0
    else
      allowed = le(aS, aN, bS, bN) and 1 or 0
    end
  end
  if allowed == 1 then
    if positive(aS, aN) then
      local s, n = add(nowS, nowN, aS, aN)
      redis.call("SET", key, string.format("%d:%d", s, n), "PX", aS * 1000 + math.ceil(aN / 1000000) + slack)
    else
      redis.call("DEL", key)
    end
  end
  return {allowed, dS, dN, 0, 0, nowS, nowN}
end

-- group decides the m keys of a group, KEYS[k + 1] on, whose kinds and
-- arguments start at ARGV[j], at one instant, and writes their new states
-- only if every key allows. It returns the group's reply.
local function group(k, j, m, nowS, nowN, slack)
  if m == 1 then
    local out = plain(KEYS[k + 1], j, nowS, nowN, slack)
    if out then
      return out
    end
  end
  local nowMs = nowS * 1000 + math.floor(nowN / 1000000)
  local out, states, at, all = {}, {}, {}, true
  for i = 1, m do
    -- the key's kind, and the time it is decided at
    local kind, vS, vN = ARGV[j], nowS, nowN
    if QUOTA[kind] then
      kind, vS, vN = QUOTA[kind], periodEnd(j, nowS, nowN)
    end
    local st, failed = read(KEYS[k + i], vS, vN, nowMs)
    if not st then
      return failed -- the group changes nothing
    end
    local allowed = decide(st, kind, j, vS, vN, nowMs)
    all = all and allowed > 0
    out[5 * i - 4], out[5 * i - 3], out[5 * i - 2] = allowed, st.dS, st.dN
    out[5 * i - 1], out[5 * i] = st.cS, st.cN
    states[i], at[2 * i - 1], at[2 * i] = st, vS, vN
    j = j + stride(ARGV[j])
  end
  if all then
    for i = 1, m do
      write(KEYS[k + i], states[i], at[2 * i - 1], at[2 * i], nowS, nowN, nowMs, slack)
    end
  end
  out[5 * m + 1], out[5 * m + 2] = nowS, nowN
  return out
end

local reply = {}
local k, j = 0, 1 -- before the group's first key; at its first argument
while j <= #ARGV do
  local m = tonumber(ARGV[j])
  local nowS, nowN, slack = now(ARGV[j + 1], ARGV[j + 2])
  reply[#reply + 1] = group(k, j + 3, m, nowS, nowN, slack)
  j = j + 3
  for _ = 1, m do
    j = j + stride(ARGV[j])
  end
  k = k + m
end
return reply
