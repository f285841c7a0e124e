-- The algorithms' arithmetic helper. Each algorithm below is a function of
-- (now, cost, limit, window, refill, grace, valid, st_start, st_count,
-- st_prev, debt) that returns allowed (0/1), remaining, reset_ms, retry_ms,
-- and, when it would charge, the new start, count, previous count and the
-- TTL the state needs. With debt it charges cost whatever is left. It
-- writes nothing.
local function idiv(a, b)
  return math.floor(a / b)
end
