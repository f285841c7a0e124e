-- One decision: KEYS and ARGV are the decision's own (a batch's are cut
-- from the call's by the driver, driver.lua), and every return ends it.
local n = ARGV[1] + 0
local cost = ARGV[2] + 0
local remembered = remembered_in(KEYS, ARGV)
local eval_id = ARGV[argv_head + n * per_policy + 1]

-- The evaluation's ring of records, and, when the ID may have been
-- decided before (ARGV 5), the record of that decision: replayed while it
-- lasts.
local places
if remembered then
  places = records[remembered]
  if not places then
    return {2}
  end
  local rec = ARGV[5] == '1' and recorded(remembered, places, eval_id .. ',', ARGV[4] + 0)
  if rec then
    local v = {3}
    for x in string.gmatch(string.sub(rec, 18 + #eval_id), '-?%d+') do
      v[#v + 1] = tonumber(x)
    end
    if (#v == 1 + 4 * n or #v == 1 + 5 * n) and tonumber(string.sub(rec, 1, 15)) > clock(ARGV[argv_head + arg_now]) then
      return v
    end
  end
end
