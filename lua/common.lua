-- The algorithms' arithmetic helper. Each algorithm below is a function of
-- (now, cost, limit, window, refill, grace, valid, st_start, st_count,
-- st_prev, debt, max_delay) that returns allowed (0/1), remaining,
-- reset_ms, retry_ms (for an allowance, its delay), and, when it would
-- charge, the new start, count, previous count and the TTL the state
-- needs. With debt it charges cost whatever is left; with a max_delay
-- above 0 (an algorithm that takes it) a request admissible within that
-- many ms is charged now and allowed with that delay. It writes nothing.
-- Each also has a give-back, <name>_give_back(cost, limit, window, start,
-- valid, st_start, st_count, st_prev), which takes back a charge of cost
-- it made whose state's start was start, and returns the new start,
-- count and previous count, or nothing when the state no longer holds it.
local function idiv(a, b)
  return math.floor(a / b)
end

-- window_at reads a policy's window argument at now: a number of ms, or
-- for a calendar policy the period boundaries the gateway computed
-- ("b0,b1,b2,b3", ms, ascending; Lua has no time zone data), of which it
-- returns the period that holds now as {start, end, next end} (next end
-- nil when the list ends at end). nil: now is in none of them, this clock
-- is a whole period off the gateway's.
local function window_at(arg, now)
  local window = tonumber(arg)
  if window then
    return window
  end
  local from, found
  for bound in string.gmatch(arg, '%d+') do
    local b = tonumber(bound)
    if found then
      found[3] = b
      return found
    end
    if from and from <= now and now < b then
      found = {from, b}
    end
    from = b
  end
  return found
end
