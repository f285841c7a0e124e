-- Shared tail: apply the decision, remember it under the evaluation ID,
-- keep the TTL long enough for both.
local allowed, remaining, reset, retry, n_start, n_count, n_prev, ttl = decide()

local function extend_ttl(ms)
  local current = redis.call('PTTL', key)
  if current < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

if allowed == 1 then
  redis.call('HSET', key, 's', n_start, 'c', n_count, 'p', n_prev, 't', now)
  extend_ttl(ttl)
end

if eval_id ~= '' then
  local size = #eval_id + DEDUP_OVERHEAD
  if size <= dedup_max_bytes then
    local held = redis.call('HMGET', key, 'dq', 'db', 'dn')
    local queue = held[1] or ''
    local bytes = tonumber(held[2] or '0')
    local entries = tonumber(held[3] or '0')
    -- Every record of a key lives for the same TTL, so insertion order is
    -- expiry order: drop from the front while expired or over a bound.
    while queue ~= '' do
      local expires, id, rest = string.match(queue, '^(%d+):([^;]*);(.*)$')
      if tonumber(expires) > now and entries < dedup_max_entries and bytes + size <= dedup_max_bytes then
        break
      end
      redis.call('HDEL', key, 'd:' .. id)
      bytes = bytes - (#id + DEDUP_OVERHEAD)
      entries = entries - 1
      queue = rest
    end
    local expires = now + dedup_ttl
    redis.call('HSET', key, 'd:' .. eval_id,
      string.format('%d,%d,%d,%d,%d', expires, allowed, remaining, reset, retry),
      'dq', queue .. string.format('%d', expires) .. ':' .. eval_id .. ';',
      'db', bytes + size, 'dn', entries + 1)
    extend_ttl(dedup_ttl + grace)
  end
end

return {0, allowed, remaining, reset, retry}
