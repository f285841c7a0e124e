-- fixed-window: count per window; deny without mutation when
-- spent + cost > limit; reset is the time to the window's end. A calendar
-- policy's window is its period, {start, end, next end} (window_at). With
-- max_delay, a request the window cannot take reserves its place in the
-- next window when that starts within max_delay: the state moves to the
-- next window, and the current one, full for it, admits nothing more.
local function fixed_window(now, cost, limit, window, refill, grace, valid, st_start, st_count, st_prev, debt, max_delay)
  local start, stop, next_stop
  if type(window) == 'table' then
    start, stop, next_stop = window[1], window[2], window[3]
  else
    start = now - now % window
    stop = start + window
    next_stop = stop + window
  end
  local spent = 0
  if valid and st_start == start then
    spent = st_count
  end
  local reset = stop - now
  local ahead = valid and st_start == stop
  if ahead then
    spent = math.max(spent, limit)
  end
  if spent + cost > limit and not debt then
    local reserved = 0
    if ahead then
      reserved = st_count
    end
    if max_delay > 0 and reset <= max_delay and next_stop and reserved + cost <= limit then
      reserved = reserved + cost
      return 1, limit - reserved, next_stop - now, reset, stop, reserved, 0, next_stop - now + grace
    end
    local retry = reset
    if max_delay > 0 then
      retry = math.max(retry - max_delay, 0)
      if ahead and reserved + cost > limit and next_stop then
        retry = next_stop - now - max_delay
      end
    end
    return 0, limit - spent, math.max(reset, retry), retry
  end
  spent = spent + cost
  return 1, limit - spent, reset, 0, start, spent, 0, reset + grace
end

local function fixed_window_give_back(cost, limit, window, start, valid, st_start, st_count, st_prev)
  if valid and st_start == start then
    return st_start, math.max(st_count - cost, 0), st_prev
  end
end
