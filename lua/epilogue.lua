-- Shared tail: one write of the state, the evaluation's record, one TTL.
local allowed, remaining, reset, retry, n_start, n_count, n_prev, ttl =
  decide(now, cost, limit, window, refill, grace, valid, st_start, st_count, st_prev)

local fields = {}
local keep = 0
if allowed == 1 then
  fields = {'s', n_start, 'c', n_count, 'p', n_prev, 't', now}
  keep = ttl
end

if record then
  local dedup_ttl = tonumber(ARGV[8])
  local max_entries = tonumber(ARGV[9])
  local max_bytes = tonumber(ARGV[10])
  local id = string.sub(record, #key + 4)
  -- What a record costs Redis, roughly: its key, its value, its place in
  -- the list and the bookkeeping of a key with a TTL.
  local size = #record + #id + 128
  if size <= max_bytes then
    local expires = now + dedup_ttl
    redis.call('SET', record, string.format('%d,%d,%d,%d,%d', expires, allowed, remaining, reset, retry), 'PX', dedup_ttl)
    local entries = redis.call('RPUSH', queue, id)
    local bytes = size
    if entries > 1 then
      bytes = tonumber(raw[5] or '0') + size
    end
    -- Oldest first out, until both bounds hold: a retry follows its first
    -- try closely, so the newest records are the ones worth keeping.
    while entries > max_entries or bytes > max_bytes do
      local old = redis.call('LPOP', queue)
      redis.call('DEL', key .. ':e:' .. old)
      bytes = bytes - (#key + 3 + 2 * #old + 128)
      entries = entries - 1
    end
    redis.call('PEXPIRE', queue, dedup_ttl)
    fields[#fields + 1] = 'eb'
    fields[#fields + 1] = bytes
    keep = math.max(keep, dedup_ttl + grace)
  end
end

if #fields > 0 then
  redis.call('HSET', key, unpack(fields))
  if exists then
    redis.call('PEXPIRE', key, keep, 'GT')
  else
    -- A new key has no TTL, and GT takes that for an endless one.
    redis.call('PEXPIRE', key, keep)
  end
end

return {0, allowed, remaining, reset, retry}
