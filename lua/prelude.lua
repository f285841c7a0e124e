-- The rate-limit script's head. One decision decides every policy of one
-- request (a route's list; one policy is a list of one) for one subject,
-- and one call makes one decision or a batch of them (driver.lua):
-- every policy is read and decided first, nothing written; then, when
-- every enforced policy allows, each policy that allows is charged, and
-- when any enforced one denies, none is. Shadow policies are decided
-- alongside and never refuse.
--
-- KEYS[1..n] the policies' state, in the request's order, one hash each:
--   s, c, p  the algorithm's state (start, count, previous count), in ms
--   t        the latest clock reading that wrote the state (ms)
--   and with de-duplication (ARGV 4 above 0), in KEYS[1] alone, the
--   remembered evaluations: a ring of places "0" to places - 1, each
--   holding one evaluation's record: its expiry (ms, 15 digits), its ID,
--   then allowed, remaining, reset, retry per policy (and each policy's
--   start when the call asked for a lease of budget), comma-separated;
--   n, the records placed since the ring last started over, and x, the
--   newest record's expiry (ms). Record k goes to place k mod places, so
--   the hash holds a subject's last places records, the oldest written
--   over first. A call that finds every record expired (x passed, on any
--   clock within the first policy's max clock regression) starts the
--   ring over at place 0 and empties the places it does not write
--   ("" in the same HSET), so a subject's records are those of its last
--   burst: the records of one subject and the state they are kept with
--   live as long as the longer of them needs, as on the memory backend.
-- KEYS[1] .. ':r:' .. the evaluation ID: a delayed request's reservation
--           record (epilogue.lua), made from KEYS[1] in the script
-- Every key shares one hash tag, the subject's, so one Cluster slot. A
-- hash is written once a call, in one HSET (a ring's thousands of places
-- in pieces), and its TTL set once, to the longest its writes asked: a
-- charge, its state's need; a record, the dedup TTL; and not at all when
-- a charge within its start found the key living as long (flush). So
-- remembering costs no command of its own: two more fields read (n, x)
-- and the records written with the state; a decision that may repeat an
-- earlier one (ARGV 5) reads the whole ring once a call and looks at
-- every record in it.
--
-- ARGV:
--   1 n    2 cost    3 dedup TTL in ms (the first policy's)
--   4 the ring's places (0: not remembered)    5 look: 1 when the evaluation ID may have been
--   decided before (a retry), so a record under it is looked for; 0 when
--   the ID is new, and nothing can be under it yet
--   then per_policy for each policy, from argv_head + (i-1)*per_policy,
--   each at its arg_<name> (args.go writes the layout and the names):
--   algorithm (its place in decide_by), now in ms or "" to read Redis TIME
--   (one clock for every gateway), limit or capacity, window or refill
--   period in ms (a calendar policy's: its period boundaries, window_at
--   in common.lua), refill tokens, cleanup grace in ms, max clock
--   regression in ms, shadow (1) or enforced (0), charge: charge_fits
--   charged cost when it fits, charge_reserve charged the policy's
--   reserve (below) when it fits, for a policy the response charges: its
--   settlement later charges the rest or gives back the difference
--   (charge_debt, charge_returned), charge_debt charged cost whatever is left (a debt may
--   follow, and remaining may be negative), charge_reserved given back
--   what the request's reservation record says it was charged,
--   charge_covered covered by the calling instance's lease of budget
--   (allowed, charged nothing, reports what is left), charge_returned a
--   lease's give-back: its unused units, the cost, go back to the state
--   whose start the lease argument gives (as for charge_reserved, every
--   policy alike);
--   max delay in ms (0: a request is refused rather than delayed);
--   lease: with charge_fits, when the request is admitted without a
--   delay, up to this many units more are charged, fewer when less is
--   left, for the calling instance to admit from (0: none); the reply's
--   remaining is what the cost left, the lease's units in it, so the
--   instance got min(lease, remaining). With charge_returned, the state's
--   start the lease was taken in; reserve: the units charge_reserve
--   charges.
--   then, after every policy's, the evaluation ID when the call is
--   de-duplicated (it heads the record), a policy holds leases
--   (concurrency; it names the lease), or may delay the request (it names
--   the reservation record; epilogue.lua)
--
-- Reply: {status}, then when decided or replayed allowed, remaining,
-- reset_ms, retry_ms per policy; an allowed policy's retry_ms is its delay
-- (0, or how long the request waits for the place it was given); when a
-- lease of budget was asked for or a policy reserved, each policy's state
-- start after them all (what a give-back of the lease or of a reserve
-- names). Status 0 decided, 1 clock unsafe, 2 state
-- unreadable, 3 replayed (a decision remembered under the same evaluation
-- ID, charged nothing). A policy that would allow a refused request reports
-- what it has left, uncharged. A denial writes no algorithm state, and a
-- call of cost 0 (a read, not remembered) writes nothing
-- at all. Every
-- write leaves its key with a TTL, so PEXPIRE ... GT can only lengthen it.
-- A number the gateway always sends (ARGV, TIME's reply) is read as x + 0:
-- one conversion, where tonumber makes two (it checks, then converts),
-- each a strtod. tonumber stays where a string may not be a number: a
-- calendar window, the stored state, a record.

-- One clock reading for every decision of the call that reads Redis's.
local redis_now
local function clock(arg)
  if arg ~= '' then
    return arg + 0
  end
  if not redis_now then
    local t = redis.call('TIME')
    redis_now = t[1] * 1000 + math.floor(t[2] / 1000)
  end
  return redis_now
end

-- What the call's decisions read and write, kept for its end (flush), so
-- that decisions of one subject in one call read each key once and write
-- it once, each seeing what the ones before it wrote: for each key read,
-- {its fields (s, c, p, t, n, x), whether the key existed before the call
-- (it has a TTL), the longest TTL a charge asked for, whether a decision
-- charged it, and how long the key is known to live on: set by a charge
-- within the start it found (ttl_by_start, epilogue.lua), nil else}.
local states, touched = {}, {}

-- state_of is key's entry in states, read on first use; nil when the key
-- holds no hash (status 2).
local function state_of(key)
  local e = states[key]
  if e then
    return e
  end
  local ok, raw = pcall(redis.call, 'HMGET', key, 's', 'c', 'p', 't', 'n', 'x')
  if not ok then
    return nil
  end
  e = {raw, raw[4] ~= false or raw[5] ~= false, 0, false}
  states[key] = e
  touched[#touched + 1] = key
  return e
end

-- limit_of is a policy's limit (a token bucket's capacity): the override
-- beside its state key (key .. ':o', set by the admin API, expiring by
-- itself) when there is one, else the argument's. A read Redis refuses
-- (the key's slot half-moved to another Cluster node) finds none: the
-- override applies again once the slot has moved. Each key's is read once
-- a call (false: none), as its state is: no command changes it meanwhile.
local overrides = {}
local function limit_of(key, arg)
  local o = overrides[key]
  if o == nil then
    local ok, v = pcall(redis.call, 'GET', key .. ':o')
    o = ok and tonumber(v) or false
    overrides[key] = o
  end
  return o or (arg + 0)
end

-- The rings of remembered evaluations the call's decisions write to: for
-- each key, the place its next record goes to (n, read with the state
-- before the first decision, and written back with the records), the
-- newest record's expiry (x), the TTL the records ask, the places written
-- in order with their records (at), how many places before the first
-- record the ring held when it started over (stale; their records are
-- emptied), and the records stored before the call, read on the first
-- look (stored). A key that cannot be read (not a hash) is false: its
-- decisions find the state unreadable. (HMGET and HSET, not HINCRBY,
-- HVALS or HDEL: the commands a strict ACL already allows, docs/redis.md.)
local records, asked = {}, {}

-- remembered_in is the key a decision's records go to (its first
-- policy's state), or false when it is not remembered (ARGV 4 is 0).
local function remembered_in(keys, argv)
  return argv[4] ~= '0' and keys[1]
end

-- reservation_of is the key of a delayed request's reservation record.
local function reservation_of(keys, eval_id)
  return keys[1] .. ':r:' .. eval_id
end

local function ask_places(keys, argv)
  local key = remembered_in(keys, argv)
  if key then
    asked[key] = math.max(asked[key] or 0, argv[3] + 0)
  end
end

local function read_places()
  for key, ttl in pairs(asked) do
    local e = state_of(key)
    if e then
      -- (An n or x that is not a number starts the ring over.)
      records[key] = {next = tonumber(e[1][5]) or 0, newest = tonumber(e[1][6]) or 0, ttl = ttl, at = {}, stale = 0}
    else
      records[key] = false
    end
  end
end

-- A command's arguments are passed with unpack, which Lua bounds (about
-- 8,000 values): a ring's places, written or read all at once, go in
-- pieces of at most this many fields.
local fields_at_once = 1000

-- hset writes args (field, value, field, value ...) to key.
local function hset(key, args)
  for i = 1, #args, 2 * fields_at_once do
    redis.call('HSET', key, unpack(args, i, math.min(i + 2 * fields_at_once - 1, #args)))
  end
end

-- place is where r's next record goes, of expiry at now, in a ring of
-- size places: the first of the call starts the ring over when every
-- record in it has expired by now, on any clock within regression (ms,
-- ARGV's string, read only then) of it (another instance's retry may
-- read one behind this one's).
local function place(r, now, regression, expiry, places)
  if not r.placed then
    r.placed = true
    if r.newest + regression <= now then
      r.stale, r.next = math.min(r.next, places), 0
    end
  end
  local at = r.next % places
  r.next = r.next + 1
  r.newest = math.max(r.newest, expiry)
  r[#r + 1] = at
  return at
end

-- record_formats are the records' string.format formats, by the length
-- of the reply they hold, made once a call.
local record_formats = {}

-- recorded is the record of the evaluation whose record begins with head
-- (its expiry comes first: 15 digits and a comma) among places, in r: the
-- latest of those the call wrote before those stored, which are read
-- once a call; nil when there is none.
local function recorded(key, r, head, places)
  for j = #r, 1, -1 do
    local rec = r.at[r[j]]
    -- (find, not sub: no new string to intern)
    if string.find(rec, head, 17, true) == 17 then
      return rec
    end
  end
  if not r.stored then
    r.stored = {}
    for from = 0, places - 1, fields_at_once do
      local some = {}
      for j = from, math.min(from + fields_at_once, places) - 1 do
        some[#some + 1] = j
      end
      for _, rec in ipairs(redis.call('HMGET', key, unpack(some))) do
        r.stored[#r.stored + 1] = rec
      end
    end
  end
  for _, rec in ipairs(r.stored) do
    if rec and string.find(rec, head, 17, true) == 17 then
      return rec
    end
  end
  return nil
end

-- flush writes what the decisions charged and remembered: each key once,
-- its state and records in one HSET, with the longest TTL asked (GT
-- unless the key is new: GT takes no TTL for an endless one).
local function flush()
  for _, key in ipairs(touched) do
    local e, r = states[key], records[key]
    local raw, ttl = e[1], e[3]
    local args = e[4] and {'s', raw[1], 'c', raw[2], 'p', raw[3], 't', raw[4]} or {}
    if r and #r > 0 then
      local at = #args
      args[at + 1], args[at + 2], args[at + 3], args[at + 4] = 'n', r.next, 'x', r.newest
      at = at + 4
      for j = 1, #r do
        args[at + 1], args[at + 2] = r[j], r.at[r[j]]
        at = at + 2
      end
      for j = 0, r.stale - 1 do
        if not r.at[j] then
          args[at + 1], args[at + 2] = j, ''
          at = at + 2
        end
      end
      -- (Unless a charge within its start found the key living longer.)
      if r.ttl > (e[5] or 0) then
        ttl = math.max(ttl, r.ttl)
      end
    end
    if #args > 0 then
      hset(key, args)
      if ttl == 0 then
        -- Only give-backs and charges within the start they found, which
        -- keep the key's TTL.
      elseif e[2] then
        redis.call('PEXPIRE', key, ttl, 'GT')
      else
        redis.call('PEXPIRE', key, ttl)
      end
    end
  end
end
