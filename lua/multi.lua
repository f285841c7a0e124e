-- Several policies of one subject and operation, decided at once: every
-- policy is read and decided first, nothing written; then, when every
-- enforced policy allows, each policy that allows is charged, and when
-- any enforced one denies, none is. Shadow policies are decided alongside
-- and never refuse.
--
-- KEYS[1..n] the policies' state hashes, laid out as in prelude.lua, all
--   under one hash tag (the subject's), so one Cluster slot.
-- With de-duplication, KEYS[n+1] this evaluation's record and KEYS[n+2]
-- the remembered IDs, named after KEYS[1] as in prelude.lua, whose hash
-- also keeps their bytes (eb). The record is
-- "expires,admitted" then "allowed,remaining,reset,retry" per policy.
--
-- ARGV:
--   1 n    2 cost    3 dedup TTL in ms    4 dedup max entries
--   5 dedup max bytes
--   then eight per policy, from 5 + (i-1)*8 + 1:
--   algorithm (1 fixed-window, 2 sliding-counter, 3 token-bucket),
--   now in ms or "" for Redis TIME, limit or capacity, window or refill
--   period in ms, refill tokens, cleanup grace in ms, max clock regression
--   in ms, shadow (1) or enforced (0)
--
-- Reply: {status, admitted, then allowed, remaining, reset_ms, retry_ms
-- per policy}; status as in prelude.lua. A policy that would allow a
-- refused request reports what it has left, uncharged.
local n = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
local record = KEYS[n + 1]
local queue = KEYS[n + 2]
local decide_by = {fixed_window, sliding_counter, token_bucket}

local redis_now
local function clock(arg)
  if arg ~= '' then
    return tonumber(arg)
  end
  if not redis_now then
    local t = redis.call('TIME')
    redis_now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return redis_now
end

if record then
  local rec = redis.call('GET', record)
  if rec then
    local v = {}
    for x in string.gmatch(rec, '%d+') do
      v[#v + 1] = tonumber(x)
    end
    if #v == 2 + 4 * n and v[1] > clock(ARGV[7]) then
      v[1] = 3
      return v
    end
  end
end

local reply = {0, 1}
local state = {}
local admitted = 1
for i = 1, n do
  local at = 5 + (i - 1) * 8
  local now = clock(ARGV[at + 2])
  local ok, raw = pcall(redis.call, 'HMGET', KEYS[i], 's', 'c', 'p', 't', 'eb')
  if not ok then
    return {2, 0}
  end
  local valid = raw[1] ~= false
  local st_start, st_count, st_prev, st_seen = 0, 0, 0, 0
  if valid then
    st_start, st_count = tonumber(raw[1]), tonumber(raw[2])
    st_prev, st_seen = tonumber(raw[3] or '0'), tonumber(raw[4])
    if not (st_start and st_count and st_prev and st_seen) then
      return {2, 0}
    end
    if st_seen > now then
      if st_seen - now > tonumber(ARGV[at + 7]) then
        return {1, 0}
      end
      now = st_seen
    end
  end
  local allowed, remaining, reset, retry, n_start, n_count, n_prev, ttl = decide_by[tonumber(ARGV[at + 1])](
    now, cost, tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4]), tonumber(ARGV[at + 5]), tonumber(ARGV[at + 6]),
    valid, st_start, st_count, st_prev)
  if allowed == 0 and ARGV[at + 8] == '0' then
    admitted = 0
  end
  state[i] = {now = now, exists = raw[4] ~= false or raw[5] ~= false, eb = raw[5],
    fields = {'s', n_start, 'c', n_count, 'p', n_prev, 't', now}, ttl = ttl}
  reply[#reply + 1] = allowed
  reply[#reply + 1] = remaining
  reply[#reply + 1] = reset
  reply[#reply + 1] = retry
end
reply[2] = admitted
if admitted == 0 then
  for i = 1, n do
    if reply[3 + (i - 1) * 4] == 1 then
      reply[4 + (i - 1) * 4] = reply[4 + (i - 1) * 4] + cost
    end
  end
end

for i = 1, n do
  local key = KEYS[i]
  local s = state[i]
  local fields = {}
  local keep = 0
  if admitted == 1 and reply[3 + (i - 1) * 4] == 1 then
    fields = s.fields
    keep = s.ttl
  end
  if i == 1 and record then
    local dedup_ttl = tonumber(ARGV[3])
    local max_entries = tonumber(ARGV[4])
    local max_bytes = tonumber(ARGV[5])
    local id = string.sub(record, #key + 4)
    local size = #record + #id + 128
    if size <= max_bytes then
      local parts = {string.format('%d', s.now + dedup_ttl)}
      for j = 2, #reply do
        parts[j] = string.format('%d', reply[j])
      end
      redis.call('SET', record, table.concat(parts, ','), 'PX', dedup_ttl)
      local entries = redis.call('RPUSH', queue, id)
      local bytes = size
      if entries > 1 then
        bytes = tonumber(s.eb or '0') + size
      end
      while entries > max_entries or bytes > max_bytes do
        local old = redis.call('LPOP', queue)
        redis.call('DEL', key .. ':e:' .. old)
        bytes = bytes - (#key + 3 + 2 * #old + 128)
        entries = entries - 1
      end
      redis.call('PEXPIRE', queue, dedup_ttl)
      fields[#fields + 1] = 'eb'
      fields[#fields + 1] = bytes
      keep = math.max(keep, dedup_ttl + tonumber(ARGV[5 + 6])) -- the first policy's grace
    end
  end
  if #fields > 0 then
    redis.call('HSET', key, unpack(fields))
    if s.exists then
      redis.call('PEXPIRE', key, keep, 'GT')
    else
      redis.call('PEXPIRE', key, keep)
    end
  end
end

return reply
