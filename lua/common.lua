-- The algorithms' arithmetic helper. Each algorithm below is a function of
-- (now, cost, limit, window, refill, grace, valid, st_start, st_count,
-- st_prev, debt) that returns allowed (0/1), remaining, reset_ms, retry_ms,
-- and, when it would charge, the new start, count, previous count and the
-- TTL the state needs. With debt it charges cost whatever is left. It
-- writes nothing.
local function idiv(a, b)
  return math.floor(a / b)
end

-- window_at reads a policy's window argument at now: a number of ms, or
-- for a calendar policy the period boundaries the gateway computed
-- ("b0,b1,b2,b3", ms, ascending; Lua has no time zone data), of which it
-- returns the period that holds now as {start, end}. nil: now is in none
-- of them, this clock is a whole period off the gateway's.
local function window_at(arg, now)
  local window = tonumber(arg)
  if window then
    return window
  end
  local from
  for bound in string.gmatch(arg, '%d+') do
    local b = tonumber(bound)
    if from and from <= now and now < b then
      return {from, b}
    end
    from = b
  end
  return nil
end
