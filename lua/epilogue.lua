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
-- (The reservation record's key, reservation_of, is made only where it
-- is used: a string per decision otherwise.)
local reserved
-- Each policy's state start, replied when a lease of budget was asked for.
local starts
if ARGV[argv_head + arg_charge] == charge_returned then
  reserved = {}
  for i = 1, n do
    reserved[i] = tonumber(ARGV[argv_head + (i - 1) * per_policy + arg_lease])
  end
elseif ARGV[argv_head + arg_charge] == charge_reserved then
  local reservation = eval_id and reservation_of(KEYS, eval_id)
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
  local at = argv_head + (i - 1) * per_policy
  local now = clock(ARGV[at + arg_now])
  local st = state_of(KEYS[i])
  if not st then
    return {2}
  end
  local raw = st[1]
  local valid = raw[1] ~= false
  local st_start, st_count, st_prev, st_seen = 0, 0, 0, 0
  if valid then
    st_start, st_count = tonumber(raw[1]), tonumber(raw[2])
    st_prev, st_seen = tonumber(raw[3] or '0'), tonumber(raw[4])
    if not (st_start and st_count and st_prev and st_seen) then
      return {2}
    end
    if st_seen > now then
      if st_seen - now > tonumber(ARGV[at + arg_max_clock_regression]) then
        return {1}
      end
      -- Behind the stored reading but within the bound: time never runs
      -- backwards for a key.
      now = st_seen
    end
  end
  local window = window_at(ARGV[at + arg_window], now)
  if not window then
    return {1}
  end
  local alg = ARGV[at + arg_algorithm] + 0
  local leases = holds_leases[alg] and KEYS[i] .. ':l'
  if leases then
    -- The leases held are the live members of the lease set.
    redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
    st_count = redis.call('ZCARD', leases)
  end
  local charge = ARGV[at + arg_charge]
  local asked = cost
  if charge == charge_checked then
    asked = 1
  elseif charge == charge_covered then
    asked = 0
  end
  local allowed, remaining, reset, retry, n_start, n_count, n_prev, ttl
  if reserved then
    allowed, remaining, reset, retry, ttl = 1, 0, 0, 0, 0
    if reserved[i] then
      n_start, n_count, n_prev = give_back_by[alg](cost, limit_of(KEYS[i], ARGV[at + arg_limit]), window, reserved[i],
        valid, st_start, st_count, st_prev)
    end
  else
    local decide = decide_by[alg]
    local limit, refill, grace, debt, max_delay = limit_of(KEYS[i], ARGV[at + arg_limit]), ARGV[at + arg_refill] + 0,
      ARGV[at + arg_cleanup_grace] + 0, charge == charge_debt, ARGV[at + arg_max_delay] + 0
    allowed, remaining, reset, retry, n_start, n_count, n_prev, ttl = decide(
      now, asked, limit, window, refill, grace, valid, st_start, st_count, st_prev, debt, max_delay)
    local lease = ARGV[at + arg_lease] + 0
    if charge == charge_fits and lease > 0 then
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
  if ttl_by_start[alg] and valid and n_start == st_start and ARGV[at + arg_now] == '' then
    -- The charge that made this start gave the key its TTL, on the clock
    -- every instance reads: PEXPIRE ... GT would change nothing. The key
    -- lives ttl more at least (what the records' TTL is held to).
    st[5] = math.max(st[5] or 0, ttl)
    ttl = 0
  end
  if charge == charge_checked and allowed == 1 then
    remaining = remaining + 1
  end
  if allowed == 0 and ARGV[at + arg_shadow] == '0' then
    admitted = false
  end
  -- now, the key's entry in states, what a charge writes, and for a
  -- policy that holds leases its lease set, lease TTL and whether shadow,
  -- then whether an admission charges it (not when only checked)
  state[i] = {now, st, n_start, n_count, n_prev, ttl,
    leases, type(window) == 'number' and window or nil, ARGV[at + arg_shadow] == '1', charge ~= charge_checked and charge ~= charge_covered}
  local at_reply = 2 + (i - 1) * 4
  reply[at_reply] = allowed
  reply[at_reply + 1] = remaining
  reply[at_reply + 2] = reset
  reply[at_reply + 3] = retry
end
if not admitted then
  for i = 1, n do
    if reply[2 + (i - 1) * 4] == 1 and state[i][10] then
      reply[3 + (i - 1) * 4] = reply[3 + (i - 1) * 4] + cost
    end
  end
end
if starts then
  for i = 1, n do
    reply[1 + 4 * n + i] = state[i][3] or 0
  end
end
if cost == 0 then
  return reply -- a read (the admin API's): nothing is written
end

-- What each key's state becomes, written at the call's end (flush).
for i = 1, n do
  local s = state[i]
  -- A shadow concurrency policy takes its lease even when it denies.
  -- (No new start: nothing to write, as for a give-back that finds the
  -- state moved on.)
  s[11] = admitted and s[10] and s[3] and (reply[2 + (i - 1) * 4] == 1 or (s[7] and s[9]))
  if s[11] then
    local keep = s[6]
    if s[7] then
      local members = {}
      for k = 1, cost do
        members[2 * k - 1] = s[1] + s[8]
        members[2 * k] = lease_member(eval_id, k)
      end
      redis.call('ZADD', s[7], unpack(members))
      if redis.call('PTTL', s[7]) < keep then
        redis.call('PEXPIRE', s[7], keep)
      end
    end
    -- (A give-back asks for no TTL, nor a charge within its state's start
    -- (ttl_by_start): each keeps the key's.)
    local e = s[2]
    local raw = e[1]
    raw[1], raw[2], raw[3], raw[4] = s[3], s[4], s[5], s[1]
    e[3] = math.max(e[3], keep)
    e[4] = true
  end
end

-- The evaluation's record, in the ring's next place.
if remembered then
  local now, expiry = state[1][1], state[1][1] + ARGV[3]
  local format = record_formats[#reply]
  if not format then
    format = '%015d,%s' .. string.rep(',%d', #reply - 1)
    record_formats[#reply] = format
  end
  places.at[place(places, now, ARGV[argv_head + arg_max_clock_regression], expiry, ARGV[4] + 0)] = string.format(format, expiry, eval_id, unpack(reply, 2))
end

-- A delayed admission (an enforced policy's retry_ms above 0) leaves its
-- reservation record for a give-back: where each policy was charged, for
-- the longest delay and the first policy's grace.
if admitted and eval_id and not reserved then
  local held = 0
  for i = 1, n do
    if ARGV[argv_head + (i - 1) * per_policy + arg_shadow] == '0' then
      held = math.max(held, reply[5 + (i - 1) * 4])
    end
  end
  if held > 0 then
    local starts = {}
    for i = 1, n do
      starts[i] = state[i][11] and state[i][3] or 'x'
    end
    redis.call('SET', reservation_of(KEYS, eval_id), table.concat(starts, ','), 'PX', held + tonumber(ARGV[argv_head + arg_cleanup_grace]))
  end
end

return reply
