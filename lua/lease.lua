-- The lease script: releases or renews the leases one admitted request
-- holds under its concurrency policies. The rate-limit script took them:
-- one member per unit of cost in each policy's lease set, a sorted set
-- KEYS[i] .. ':l' scored by the lease's expiry in the policy's clock (ms).
--
-- KEYS[1..n] the lease sets, all under the subject's hash tag (one slot)
-- ARGV: 1 "release" or "renew", 2 the lease ID (the evaluation ID),
--   3 cost, then three per key from 3 + (i-1)*3 + 1: now in ms or "" to
--   read Redis TIME, the lease TTL in ms, the cleanup grace in ms.
-- Reply: {the number of members released or renewed}. A renewal touches
-- only members still held (XX) and never shortens one (GT): a lease
-- released, or expired and dropped, stays so.
local op, id, cost = ARGV[1], ARGV[2], tonumber(ARGV[3])
local members = {}
for k = 1, cost do
  members[k] = lease_member(id, k)
end
local done = 0
for i = 1, #KEYS do
  local at = 3 + (i - 1) * 3
  if op == 'release' then
    done = done + redis.call('ZREM', KEYS[i], unpack(members))
  else
    local now = tonumber(ARGV[at + 1])
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local ttl, grace = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
    -- An expired member not yet dropped is void: it is not renewed.
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
    local args = {}
    for k = 1, cost do
      args[2 * k - 1] = now + ttl
      args[2 * k] = members[k]
    end
    done = done + redis.call('ZADD', KEYS[i], 'XX', 'GT', 'CH', unpack(args))
    if redis.call('PTTL', KEYS[i]) < ttl + grace then
      redis.call('PEXPIRE', KEYS[i], ttl + grace)
    end
  end
end
return {done}
