-- One decision: KEYS and ARGV are the decision's own (a batch's are cut
-- from the call's by the driver, driver.lua), and every return ends it.
local n = ARGV[1] + 0
local cost = ARGV[2] + 0
local remembered = KEYS[n + 1]
local eval_id = ARGV[argv_head + n * per_policy + 1]

-- The remembered records by place (the evaluation's eight read: false when
-- empty), and what a record of this evaluation holds after its expiry.
local places, head
if remembered then
  places = records[remembered]
  if not places then
    return {2}
  end
  head = eval_id .. ','
  for j = 4, 11 do
    local rec = places[ARGV[j]]
    -- (find, not sub: no new string to intern)
    if rec and string.find(rec, head, 17, true) == 17 then
      local v = {3}
      for x in string.gmatch(string.sub(rec, 17 + #head), '-?%d+') do
        v[#v + 1] = tonumber(x)
      end
      if (#v == 1 + 4 * n or #v == 1 + 5 * n) and tonumber(string.sub(rec, 1, 15)) > clock(ARGV[argv_head + 2]) then
        return v
      end
    end
  end
end
