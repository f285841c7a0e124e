-- The penalties script: keeps the hash of the penalties in force and,
-- beside it, the sorted set of their ends, so that the sweep reads only
-- what ended (package limiter, redis_penalties.go).
--
-- KEYS[1] the hash: a field per penalty, route .. '\0' .. pseudonym, its
--   value the penalty as JSON
-- KEYS[2] the sorted set: the same fields, scored by the penalty's end in
--   unix ms
-- Both keys share one hash tag: one Cluster slot.
-- ARGV[1] 'impose', 'lift' or 'sweep', then
--   impose: 2 the field, 3 the penalty, 4 its end in ms. Nothing is written
--     when the field holds a penalty that ends no sooner.
--     Reply: {1 when written, else 0}.
--   lift: 2 the field, 3 now in ms.
--     Reply: {1 when the field held a penalty in force at now, else 0}.
--   sweep: 2 now in ms, 3 the most fields deleted. Deletes the fields that
--     ended at now: a field written again since with a later end is not
--     among them.
--     Reply: {the number of fields deleted}.
-- Any other op is an error.
--
-- Redis keeps the writes of a script a failed call ends (an ACL without
-- HSET, say), so the sorted set is written first and emptied last: every
-- field of the hash has its end there, and the sweep deletes it.
local op = ARGV[1]
if op == 'impose' then
  local held = redis.call('ZSCORE', KEYS[2], ARGV[2])
  if held and tonumber(held) >= tonumber(ARGV[4]) then
    return {0}
  end
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[2])
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  return {1}
elseif op == 'lift' then
  local held = redis.call('ZSCORE', KEYS[2], ARGV[2])
  local deleted = redis.call('HDEL', KEYS[1], ARGV[2])
  redis.call('ZREM', KEYS[2], ARGV[2])
  if deleted == 1 and held and tonumber(held) > tonumber(ARGV[3]) then
    return {1}
  end
  return {0}
elseif op ~= 'sweep' then
  return redis.error_reply('ERR penalties: unknown op')
end
local ended = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[2], 'LIMIT', 0, ARGV[3])
if #ended > 0 then
  redis.call('HDEL', KEYS[1], unpack(ended))
  redis.call('ZREM', KEYS[2], unpack(ended))
end
return {#ended}
