-- sliding-counter: the previous window weighted by the part of it that
-- still overlaps, plus the current window. Approximate.
local function decay_wait(count, allowed, window)
  if count <= allowed then
    return 0
  end
  return window - idiv((allowed + 1) * window - 1, count)
end

local function sliding_counter(now, cost, limit, window, refill, grace, valid, st_start, st_count, st_prev, debt, max_delay)
  local start = now - now % window
  local elapsed = now - start
  local current, previous = 0, 0
  if valid then
    if st_start == start then
      current, previous = st_count, st_prev
    elseif st_start == start - window then
      previous = st_count
    end
  end
  local estimate = idiv(previous * (window - elapsed), window) + current
  if estimate + cost > limit and not debt then
    local retry
    local room = limit - cost - current
    if room >= 0 then
      retry = decay_wait(previous, room, window) - elapsed
    else
      retry = window - elapsed + decay_wait(current, limit - cost, window)
    end
    retry = math.max(retry, 1)
    local reset = 0
    if current > 0 then
      reset = 2 * window - elapsed
    elseif previous > 0 then
      reset = window - elapsed
    end
    return 0, math.max(limit - estimate, 0), math.max(reset, retry), retry
  end
  current = current + cost
  local reset = 2 * window - elapsed
  return 1, limit - estimate - cost, reset, 0, start, current, previous, reset + grace
end

-- A charge made in the window at start is in the current count, or in
-- the previous one once the state has moved on a window.
local function sliding_counter_give_back(cost, limit, window, start, valid, st_start, st_count, st_prev)
  if valid and st_start == start then
    return st_start, math.max(st_count - cost, 0), st_prev
  elseif valid and st_start == start + window then
    return st_start, st_count, math.max(st_prev - cost, 0)
  end
end
