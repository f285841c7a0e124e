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
-- KEYS[1] .. ':r:' .. the evaluation ID: a delayed request's reservation
--           record (epilogue.lua), made from KEYS[1] in the script
-- With de-duplication one more key follows:
-- KEYS[n+1] the remembered evaluations, a hash: a ring of places "0" to
--           places - 1 (ARGV 4), each holding one evaluation's record: its
--           expiry (ms, 15 digits), its ID, then allowed, remaining,
--           reset, retry per policy (and each policy's start when the call
--           asked for a lease of budget), comma-separated; and n, how many
--           records were ever placed. Record k goes to place k mod places,
--           so the hash holds a subject's last places records, the oldest
--           written over first. The hash expires ttl after its last write.
-- Every key shares one hash tag, the subject's, so one Cluster slot.
-- Remembering costs n read, the records and n written and the TTL renewed,
-- once a call; a decision that may repeat an earlier one (ARGV 5) reads
-- the whole ring once a call and looks at every record in it.
--
-- ARGV:
--   1 n    2 cost    3 dedup TTL in ms (the first policy's)
--   4 the ring's places    5 look: 1 when the evaluation ID may have been
--   decided before (a retry), so a record under it is looked for; 0 when
--   the ID is new, and nothing can be under it yet
--   then eleven per policy, from 5 + (i-1)*11 + 1:
--   algorithm (its place in decide_by), now in ms or "" to read Redis TIME
--   (one clock for every gateway), limit or capacity, window or refill
--   period in ms (a calendar policy's: its period boundaries, window_at
--   in common.lua), refill tokens, cleanup grace in ms, max clock
--   regression in ms, shadow (1) or enforced (0), charge: 0 charged cost
--   when it fits, 1 checked only (allows while at least 1 is left, charged
--   nothing, and reports what is left uncharged), 2 charged cost whatever
--   is left (a debt may follow, and remaining may be negative), 3 given
--   back what the request's reservation record says it was charged, 4
--   covered by the calling instance's lease of budget (allowed, charged
--   nothing, reports what is left), 5 a lease's give-back: its unused
--   units, the cost, go back to the state whose start the lease argument
--   gives (as for 3, every policy alike);
--   max delay in ms (0: a request is refused rather than delayed);
--   the lease: with charge 0, when the request is admitted without a
--   delay, up to this many units more are charged, fewer when less is
--   left, for the calling instance to admit from (0: none); the reply's
--   remaining is what the cost left, the lease's units in it, so the
--   instance got min(lease, remaining). With charge 5, the state's start
--   the lease was taken in.
--   then, after every policy's, the evaluation ID when the call is
--   de-duplicated (it heads the record), a policy holds leases
--   (concurrency; it names the lease), or may delay the request (it names
--   the reservation record; epilogue.lua)
--
-- Reply: {status}, then when decided or replayed allowed, remaining,
-- reset_ms, retry_ms per policy; an allowed policy's retry_ms is its delay
-- (0, or how long the request waits for the place it was given); when a
-- lease of budget was asked for, each policy's state start after them all
-- (what a give-back of the lease names). Status 0 decided, 1 clock unsafe, 2 state
-- unreadable, 3 replayed (a decision remembered under the same evaluation
-- ID, charged nothing). A policy that would allow a refused request reports
-- what it has left, uncharged. A denial writes no algorithm state, and a
-- call of cost 0 (a read, without the de-duplication keys) writes nothing
-- at all. Every
-- write leaves its key with a TTL, so PEXPIRE ... GT can only lengthen it.
-- A number the gateway always sends (ARGV, TIME's reply) is read as x + 0:
-- one conversion, where tonumber makes two (it checks, then converts),
-- each a strtod. tonumber stays where a string may not be a number: a
-- calendar window, the stored state, a record.
local per_policy = 11
local argv_head = 5 -- the arguments before the first policy's

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
-- it once, each seeing what the ones before it wrote: for each state key
-- read, {its fields (s, c, p, t), whether it existed before the call,
-- the longest TTL a charge asked for, whether a decision charged it}.
local states, touched = {}, {}

-- state_of is key's entry in states, read on first use; nil when the key
-- holds no hash (status 2).
local function state_of(key)
  local e = states[key]
  if e then
    return e
  end
  local ok, raw = pcall(redis.call, 'HMGET', key, 's', 'c', 'p', 't')
  if not ok then
    return nil
  end
  e = {raw, raw[4] ~= false, 0, false}
  states[key] = e
  touched[#touched + 1] = key
  return e
end

-- The rings of remembered evaluations the call's decisions write to: for
-- each hash, the place its next record goes to (n, read once before the
-- first decision, and written back with the records), the TTL to leave
-- the hash with, the places written in order with their records (at),
-- and the records stored before the call, read on the first look
-- (stored). A hash that cannot be read (not a hash) is false: its
-- decisions find the state unreadable. (HMGET and HSET, not HINCRBY and
-- HVALS: the commands a strict ACL already allows, docs/redis.md.)
local records, asked = {}, {}

local function ask_places(keys, argv)
  local key = keys[argv[1] + 1]
  if key then
    asked[key] = math.max(asked[key] or 0, argv[3] + 0)
  end
end

local function read_places()
  for key, ttl in pairs(asked) do
    local ok, got = pcall(redis.call, 'HMGET', key, 'n')
    local n = ok and (got[1] == false and 0 or tonumber(got[1]))
    if n then
      records[key] = {next = n, ttl = ttl, at = {}}
    else
      records[key] = false
    end
  end
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
    local all = {}
    for j = 1, places do
      all[j] = j - 1
    end
    r.stored = redis.call('HMGET', key, unpack(all))
  end
  for _, rec in ipairs(r.stored) do
    if rec and string.find(rec, head, 17, true) == 17 then
      return rec
    end
  end
  return nil
end

-- flush writes what the decisions charged: each state once, with the
-- longest TTL asked (GT unless the key is new: GT takes no TTL for an
-- endless one), and each hash of records once.
local function flush()
  for _, key in ipairs(touched) do
    local e = states[key]
    if e[4] then
      local raw = e[1]
      redis.call('HSET', key, 's', raw[1], 'c', raw[2], 'p', raw[3], 't', raw[4])
      if e[3] == 0 then
        -- Only give-backs and charges within the start they found, which
        -- keep the key's TTL.
      elseif e[2] then
        redis.call('PEXPIRE', key, e[3], 'GT')
      else
        redis.call('PEXPIRE', key, e[3])
      end
    end
  end
  for key, r in pairs(records) do
    if r then
      if #r > 0 then
        local args = {'n', r.next}
        for j = 1, #r do
          args[2 * j + 1] = r[j]
          args[2 * j + 2] = r.at[r[j]]
        end
        redis.call('HSET', key, unpack(args))
        redis.call('PEXPIRE', key, r.ttl)
      end
    end
  end
end
