-- fixed-window: count per window; deny without mutation when
-- spent + cost > limit; reset is the time to the window's end. A calendar
-- policy's window is its period, {start, end} (window_at).
local function fixed_window(now, cost, limit, window, refill, grace, valid, st_start, st_count, st_prev, debt)
  local start, stop
  if type(window) == 'table' then
    start, stop = window[1], window[2]
  else
    start = now - now % window
    stop = start + window
  end
  local spent = 0
  if valid and st_start == start then
    spent = st_count
  end
  local reset = stop - now
  if spent + cost > limit and not debt then
    return 0, limit - spent, reset, reset
  end
  spent = spent + cost
  return 1, limit - spent, reset, 0, start, spent, 0, reset + grace
end
