-- token-bucket: capacity tokens, refill tokens added per whole period;
-- the stored timestamp advances by whole periods only, so the partial
-- period in progress is never lost.
local function token_bucket(now, cost, limit, window, refill, grace, valid, st_start, st_count, st_prev, debt)
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
  if tokens < cost and not debt then
    local retry = refilled + idiv(cost - tokens + refill - 1, refill) * period - now
    return 0, tokens, until_full(tokens), retry
  end
  tokens = tokens - cost
  local reset = until_full(tokens)
  return 1, tokens, reset, 0, refilled, tokens, 0, reset + grace
end
