-- A lease of cost c is c members of its policy's lease set, named by the
-- lease ID (the request's evaluation ID): the first the ID itself, the
-- k-th ID#k. Both scripts name them alike.
local function lease_member(id, k)
  if k == 1 then
    return id
  end
  return id .. '#' .. k
end
