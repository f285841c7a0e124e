-- The call: one decision (ARGV as prelude.lua lists it), or a batch of
-- them, ARGV[1] "b": ARGV[2] decisions, each as its number of keys (0:
-- the keys of the decision before), its number of arguments, how many of
-- them are the decision before's first ones, and the rest of them; its
-- keys, when it has its own, in KEYS in the same order. The gateway
-- batches the decisions that wait for one Redis node at the same moment
-- (limiter/batch.go): they read each key once and write it once, and
-- each is decided as if it ran alone after the ones before it. A batch's
-- reply is the list of its decisions' replies; a decision that raises an
-- error (a command of its refused) has that error as its reply, and the
-- others go on, as they would alone.
if ARGV[1] == 'b' then
  local count = ARGV[2] + 0
  local keys_of, argv_of = {}, {}
  local keys, argv = {}, {}
  local k, a = 1, 3
  for d = 1, count do
    local nk, na, lead = ARGV[a] + 0, ARGV[a + 1] + 0, ARGV[a + 2] + 0
    if nk > 0 then
      -- (unpack into a constructor: each table made at its size at once)
      keys = {unpack(KEYS, k, k + nk - 1)}
      k = k + nk
    end
    local own = {unpack(argv, 1, lead)}
    for i = lead + 1, na do
      own[i] = ARGV[a + 2 + i - lead]
    end
    a = a + 3 + na - lead
    argv = own
    keys_of[d], argv_of[d] = keys, argv
    ask_places(keys, argv)
  end
  read_places()
  local out = {}
  for d = 1, count do
    local ok, reply = pcall(decide, keys_of[d], argv_of[d])
    if not ok and not (type(reply) == 'table' and reply.err) then
      -- A Lua error, not a command's: a string.
      reply = {err = 'ERR ' .. tostring(reply)}
    end
    out[d] = reply
  end
  flush()
  return out
end
ask_places(KEYS, ARGV)
read_places()
local reply = decide(KEYS, ARGV)
flush()
return reply
