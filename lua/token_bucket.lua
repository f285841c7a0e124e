-- token-bucket: capacity tokens, refill tokens added per whole period;
-- the stored timestamp advances by whole periods only, so the partial
-- period in progress is never lost.
local function token_bucket(now, cost, limit, window, refill, grace, valid, st_start, st_count, st_prev, debt, max_delay)
  local capacity, period = limit, window
  local tokens, refilled = capacity, now
  if valid then
    tokens, refilled = st_count, st_start
    local periods = idiv(now - refilled, period)
    if periods > 0 then
      refilled = refilled + periods * period
      if periods >= idiv(capacity - tokens + refill - 1, refill) then
        tokens = capacity
      else
        tokens = tokens + periods * refill
      end
    end
  end
  local function until_full(t)
    if t >= capacity then
      return 0
    end
    return refilled + idiv(capacity - t + refill - 1, refill) * period - now
  end
  local delay = 0
  if tokens < cost and not debt then
    local retry = refilled + idiv(cost - tokens + refill - 1, refill) * period - now
    if retry > max_delay then
      -- A retry is admitted, held, once its tokens are due within max_delay.
      return 0, tokens, until_full(tokens), retry - max_delay
    end
    -- Taken now, into a debt the refills of the delay pay back.
    delay = retry
  end
  tokens = tokens - cost
  local reset = until_full(tokens)
  return 1, tokens, reset, delay, refilled, tokens, 0, reset + grace
end

-- The tokens go back, up to capacity: added to the stored count before
-- the refills since, or after, both stop at capacity.
local function token_bucket_give_back(cost, limit, window, start, valid, st_start, st_count, st_prev)
  if valid then
    return st_start, math.min(st_count + cost, limit), st_prev
  end
end
