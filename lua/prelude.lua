-- Shared head of every rate-limit script. It reads one key, KEYS[1], a hash:
--   s, c, p  the algorithm's state (start, count, previous count), in ms
--   t        the latest clock reading that wrote the state (ms)
--   d:<id>   a remembered decision: "expires,allowed,remaining,reset,retry"
--   dq       the remembered IDs in insertion order: "<expires>:<id>;" each
--   db, dn   the bytes and the number of the remembered decisions
--
-- ARGV:
--   1 now in ms, or "" to read Redis TIME (one clock for every gateway)
--   2 cost                    3 limit or capacity
--   4 window or refill period in ms
--   5 refill tokens (token bucket; 0 otherwise)
--   6 cleanup grace in ms     7 max clock regression in ms
--   8 evaluation ID, or "" for no de-duplication
--   9 dedup TTL in ms        10 dedup max entries    11 dedup max bytes
--
-- Reply: {status, allowed, remaining, reset_ms, retry_ms}
--   status 0 decided, 1 clock unsafe, 2 state unreadable, 3 replayed
--   (a decision remembered under the same evaluation ID, charged nothing).
-- A denial writes no state. Every write leaves the key with a TTL.
local key = KEYS[1]
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local cost = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local window = tonumber(ARGV[4])
local refill = tonumber(ARGV[5])
local grace = tonumber(ARGV[6])
local max_regression = tonumber(ARGV[7])
local eval_id = ARGV[8]
local dedup_ttl = tonumber(ARGV[9])
local dedup_max_entries = tonumber(ARGV[10])
local dedup_max_bytes = tonumber(ARGV[11])
local DEDUP_OVERHEAD = 64

local ok, raw = pcall(redis.call, 'HMGET', key, 's', 'c', 'p', 't')
if not ok then
  return {2, 0, 0, 0, 0}
end

if eval_id ~= '' then
  local rec = redis.call('HGET', key, 'd:' .. eval_id)
  if rec then
    local e, a, r, rs, rt = string.match(rec, '^(%d+),(%d),(%d+),(%d+),(%d+)$')
    if e and tonumber(e) > now then
      return {3, tonumber(a), tonumber(r), tonumber(rs), tonumber(rt)}
    end
  end
end

local valid = raw[1] ~= false
local st_start, st_count, st_prev, st_seen = 0, 0, 0, 0
if valid then
  st_start, st_count = tonumber(raw[1]), tonumber(raw[2])
  st_prev, st_seen = tonumber(raw[3] or '0'), tonumber(raw[4])
  if not (st_start and st_count and st_prev and st_seen) then
    return {2, 0, 0, 0, 0}
  end
  if st_seen > now then
    if st_seen - now > max_regression then
      return {1, 0, 0, 0, 0}
    end
    -- Behind the stored reading but within the bound: time never runs
    -- backwards for a key.
    now = st_seen
  end
end

local function idiv(a, b)
  return math.floor(a / b)
end

-- decide is defined by the algorithm below; it returns
-- allowed (0/1), remaining, reset_ms, retry_ms, and, when charged,
-- the new start, count, previous count and the TTL the state needs.
