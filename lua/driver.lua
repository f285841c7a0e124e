-- The call: one decision (ARGV as prelude.lua lists it), or a batch of
-- them, ARGV[1] "b": ARGV[2] decisions, each as its number of keys, its
-- number of arguments and its arguments, its keys in KEYS in the same
-- order. The gateway batches the decisions of one subject that wait for
-- one Redis node at the same moment (limiter/batch.go): they read the
-- subject's keys once and write them once, and each is decided as if it
-- ran alone after the ones before it. A batch's reply is the list of its
-- decisions' replies.
if ARGV[1] == 'b' then
  local count = ARGV[2] + 0
  local keys_of, argv_of = {}, {}
  local k, a = 1, 3
  for d = 1, count do
    local nk, na = ARGV[a] + 0, ARGV[a + 1] + 0
    local keys, argv = {}, {}
    for j = 1, nk do
      keys[j] = KEYS[k + j - 1]
    end
    for j = 1, na do
      argv[j] = ARGV[a + 1 + j]
    end
    k, a = k + nk, a + 2 + na
    keys_of[d], argv_of[d] = keys, argv
    ask_places(keys, argv)
  end
  read_places()
  local out = {}
  for d = 1, count do
    out[d] = decide(keys_of[d], argv_of[d])
  end
  flush()
  return out
end
ask_places(KEYS, ARGV)
read_places()
local reply = decide(KEYS, ARGV)
flush()
return reply
