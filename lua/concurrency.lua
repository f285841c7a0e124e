-- concurrency: at most limit leases held at once. st_count is the number
-- of live leases, which the epilogue counts from the policy's lease set
-- (KEYS[i] .. ':l') before calling; window is the lease TTL. A denial
-- still returns the state a lease would leave, which the epilogue writes
-- for a shadow policy only: its request goes on, and is in flight.
local function concurrency(now, cost, limit, window, refill, grace, valid, st_start, st_count, st_prev, debt, max_delay)
  local held = st_count
  if held + cost > limit then
    return 0, math.max(limit - held, 0), 1000, 1000, 0, held + cost, 0, window + grace
  end
  return 1, limit - held - cost, 0, 0, 0, held + cost, 0, window + grace
end

-- A lease ends by its release (lease.lua): nothing to give back here.
local function concurrency_give_back(cost, limit, window, start, valid, st_start, st_count, st_prev)
end
