-- fixed-window: count per window; deny without mutation when
-- spent + cost > limit; reset is the time to the window's end.
local function fixed_window(now, cost, limit, window, refill, grace, valid, st_start, st_count, st_prev, debt)
  local start = now - now % window
  local spent = 0
  if valid and st_start == start then
    spent = st_count
  end
  local reset = start + window - now
  if spent + cost > limit and not debt then
    return 0, limit - spent, reset, reset
  end
  spent = spent + cost
  return 1, limit - spent, reset, 0, start, spent, 0, reset + grace
end
