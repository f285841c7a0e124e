-- Shared head of every rate-limit script.
--
-- KEYS[1] is the subject's state, a hash:
--   s, c, p  the algorithm's state (start, count, previous count), in ms
--   t        the latest clock reading that wrote the state (ms)
--   eb       the bytes of the remembered evaluations listed in KEYS[3]
-- With de-duplication two more keys follow, sharing KEYS[1]'s hash tag so
-- that all three live on one Cluster slot:
-- KEYS[2]  this evaluation's record, "expires,allowed,remaining,reset,retry",
--          a string that also expires on its own (PX)
-- KEYS[3]  the remembered evaluation IDs, a list, oldest first; the record
--          of ID x is KEYS[1] .. ':e:' .. x
-- Remembering costs O(1) whatever the number remembered: one GET, one SET,
-- one RPUSH, and one LPOP and DEL per record pushed out by the bounds.
--
-- ARGV:
--   1 now in ms, or "" to read Redis TIME (one clock for every gateway)
--   2 cost                    3 limit or capacity
--   4 window or refill period in ms
--   5 refill tokens (token bucket; 0 otherwise)
--   6 cleanup grace in ms     7 max clock regression in ms
--   8 dedup TTL in ms         9 dedup max entries      10 dedup max bytes
--
-- Reply: {status, allowed, remaining, reset_ms, retry_ms}
--   status 0 decided, 1 clock unsafe, 2 state unreadable, 3 replayed
--   (a decision remembered under the same evaluation ID, charged nothing).
-- A denial writes no algorithm state. Every write leaves KEYS[1] with a
-- TTL, so PEXPIRE ... GT can only lengthen it.
local key = KEYS[1]
local record = KEYS[2]
local queue = KEYS[3]

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

if record then
  local rec = redis.call('GET', record)
  if rec then
    local e, a, r, rs, rt = string.match(rec, '^(%d+),(%d),(%d+),(%d+),(%d+)$')
    if e and tonumber(e) > now then
      return {3, tonumber(a), tonumber(r), tonumber(rs), tonumber(rt)}
    end
  end
end

local ok, raw = pcall(redis.call, 'HMGET', key, 's', 'c', 'p', 't', 'eb')
if not ok then
  return {2, 0, 0, 0, 0}
end
local exists = raw[4] ~= false or raw[5] ~= false

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

