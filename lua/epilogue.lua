-- The rate-limit script's tail: read and decide every policy, then write.
-- A policy whose algorithm holds leases (holds_leases) counts the live
-- members of its lease set KEYS[i] .. ':l' (same hash tag) as its state's
-- count, and when charged adds its lease, named by eval_id.
-- A give-back (charge 3, every policy alike) reads and deletes the
-- request's reservation record, "start,..." per policy ("x": not
-- charged), which a delayed admission wrote, and gives each policy its
-- cost back where the record says; without a record it does nothing.
-- A lease's give-back (charge 5) gives each policy the cost back in the
-- state whose start its lease argument names.
-- Sized for one policy at once; more grow it.
local reply = {0, 0, 0, 0, 0}
local state = {}
local admitted = true
local reservation = eval_id and KEYS[1] .. ':r:' .. eval_id
local reserved
-- Each policy's state start, replied when a lease of budget was asked for.
local starts
if ARGV[5 + 9] == '5' then
  reserved = {}
  for i = 1, n do
    reserved[i] = tonumber(ARGV[5 + (i - 1) * per_policy + 11])
  end
elseif ARGV[5 + 9] == '3' then
  local rec = reservation and redis.call('GET', reservation)
  if not rec then
    return {0}
  end
  redis.call('DEL', reservation)
  reserved = {}
  local i = 0
  for start in string.gmatch(rec, '[^,]+') do
    i = i + 1
    reserved[i] = tonumber(start) or false
  end
end
for i = 1, n do
  local at = 5 + (i - 1) * per_policy
  local now = clock(ARGV[at + 2])
  local ok, raw = pcall(redis.call, 'HMGET', KEYS[i], 's', 'c', 'p', 't', 'eb')
  if not ok then
    return {2}
  end
  local valid = raw[1] ~= false
  local st_start, st_count, st_prev, st_seen = 0, 0, 0, 0
  if valid then
    st_start, st_count = tonumber(raw[1]), tonumber(raw[2])
    st_prev, st_seen = tonumber(raw[3] or '0'), tonumber(raw[4])
    if not (st_start and st_count and st_prev and st_seen) then
      return {2}
    end
    if st_seen > now then
      if st_seen - now > tonumber(ARGV[at + 7]) then
        return {1}
      end
      -- Behind the stored reading but within the bound: time never runs
      -- backwards for a key.
      now = st_seen
    end
  end
  local window = window_at(ARGV[at + 4], now)
  if not window then
    return {1}
  end
  local alg = ARGV[at + 1] + 0
  local leases = holds_leases[alg] and KEYS[i] .. ':l'
  if leases then
    -- The leases held are the live members of the lease set.
    redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
    st_count = redis.call('ZCARD', leases)
  end
  local charge = ARGV[at + 9]
  local asked = cost
  if charge == '1' then
    asked = 1
  elseif charge == '4' then
    asked = 0
  end
  local allowed, remaining, reset, retry, n_start, n_count, n_prev, ttl
  if reserved then
    allowed, remaining, reset, retry, ttl = 1, 0, 0, 0, 0
    if reserved[i] then
      n_start, n_count, n_prev = give_back_by[alg](cost, tonumber(ARGV[at + 3]), window, reserved[i],
        valid, st_start, st_count, st_prev)
    end
  else
    local decide = decide_by[alg]
    local limit, refill, grace, debt, max_delay = ARGV[at + 3] + 0, ARGV[at + 5] + 0,
      ARGV[at + 6] + 0, charge == '2', ARGV[at + 10] + 0
    allowed, remaining, reset, retry, n_start, n_count, n_prev, ttl = decide(
      now, asked, limit, window, refill, grace, valid, st_start, st_count, st_prev, debt, max_delay)
    local lease = ARGV[at + 11] + 0
    if charge == '0' and lease > 0 then
      -- A lease of budget: its units are charged with the cost, and like
      -- any charge written only when the request is admitted.
      starts = starts or {}
      local units = math.min(lease, remaining)
      if allowed == 1 and retry == 0 and units > 0 then
        local _
        _, _, _, _, n_start, n_count, n_prev, ttl = decide(
          now, asked + units, limit, window, refill, grace, valid, st_start, st_count, st_prev, debt, 0)
      end
    end
  end
  if charge == '1' and allowed == 1 then
    remaining = remaining + 1
  end
  if allowed == 0 and ARGV[at + 8] == '0' then
    admitted = false
  end
  -- now, whether the key exists, its eb, what a charge writes, and for a
  -- policy that holds leases its lease set, lease TTL and whether shadow,
  -- then whether an admission charges it (not when only checked)
  state[i] = {now, raw[4] ~= false or raw[5] ~= false, raw[5], n_start, n_count, n_prev, ttl,
    leases, type(window) == 'number' and window or nil, ARGV[at + 8] == '1', charge ~= '1' and charge ~= '4'}
  local at_reply = 2 + (i - 1) * 4
  reply[at_reply] = allowed
  reply[at_reply + 1] = remaining
  reply[at_reply + 2] = reset
  reply[at_reply + 3] = retry
end
if not admitted then
  for i = 1, n do
    if reply[2 + (i - 1) * 4] == 1 and state[i][11] then
      reply[3 + (i - 1) * 4] = reply[3 + (i - 1) * 4] + cost
    end
  end
end
if starts then
  for i = 1, n do
    reply[1 + 4 * n + i] = state[i][4] or 0
  end
end
if cost == 0 then
  return reply -- a read (the admin API's): nothing is written
end

-- One write of each key's state, the evaluation's record, one TTL each.
for i = 1, n do
  local key = KEYS[i]
  local s = state[i]
  local fields = {}
  local keep = 0
  -- A shadow concurrency policy takes its lease even when it denies.
  -- (No new start: nothing to write, as for a give-back that finds the
  -- state moved on.)
  s[12] = admitted and s[11] and s[4] and (reply[2 + (i - 1) * 4] == 1 or (s[8] and s[10]))
  if s[12] then
    fields = {'s', s[4], 'c', s[5], 'p', s[6], 't', s[1]}
    keep = s[7]
    if s[8] then
      local members = {}
      for k = 1, cost do
        members[2 * k - 1] = s[1] + s[9]
        members[2 * k] = lease_member(eval_id, k)
      end
      redis.call('ZADD', s[8], unpack(members))
      if redis.call('PTTL', s[8]) < keep then
        redis.call('PEXPIRE', s[8], keep)
      end
    end
  end
  if i == 1 and record then
    local dedup_ttl = ARGV[3] + 0
    local max_entries = ARGV[4] + 0
    local max_bytes = ARGV[5] + 0
    local id = string.sub(record, #key + 4)
    -- What a record costs Redis, roughly: its key, its value, its place in
    -- the list and the bookkeeping of a key with a TTL.
    local size = #record + #id + 128
    if size <= max_bytes then
      local format = '%d' .. string.rep(',%d', #reply - 1)
      redis.call('SET', record, string.format(format, s[1] + dedup_ttl, unpack(reply, 2)), 'PX', ARGV[3])
      local entries = redis.call('RPUSH', queue, id)
      local bytes = size
      if entries > 1 then
        bytes = tonumber(s[3] or '0') + size
      end
      -- Oldest first out, until both bounds hold: a retry follows its first
      -- try closely, so the newest records are the ones worth keeping.
      while entries > max_entries or bytes > max_bytes do
        local old = redis.call('LPOP', queue)
        redis.call('DEL', key .. ':e:' .. old)
        bytes = bytes - (#key + 3 + 2 * #old + 128)
        entries = entries - 1
      end
      redis.call('PEXPIRE', queue, ARGV[3])
      fields[#fields + 1] = 'eb'
      fields[#fields + 1] = bytes
      keep = math.max(keep, dedup_ttl + ARGV[5 + 6]) -- the first policy's grace
    end
  end
  if #fields > 0 then
    redis.call('HSET', key, unpack(fields))
    if keep == 0 then
      -- A give-back keeps the key's TTL.
    elseif s[2] then
      redis.call('PEXPIRE', key, keep, 'GT')
    else
      -- A new key has no TTL, and GT takes that for an endless one.
      redis.call('PEXPIRE', key, keep)
    end
  end
end

-- A delayed admission (an enforced policy's retry_ms above 0) leaves its
-- reservation record for a give-back: where each policy was charged, for
-- the longest delay and the first policy's grace.
if admitted and reservation and not reserved then
  local held = 0
  for i = 1, n do
    if ARGV[5 + (i - 1) * per_policy + 8] == '0' then
      held = math.max(held, reply[5 + (i - 1) * 4])
    end
  end
  if held > 0 then
    local starts = {}
    for i = 1, n do
      starts[i] = state[i][12] and state[i][4] or 'x'
    end
    redis.call('SET', reservation, table.concat(starts, ','), 'PX', held + tonumber(ARGV[5 + 6]))
  end
end

return reply
