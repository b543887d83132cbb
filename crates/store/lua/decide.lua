-- Decides every key on its own, in order, each consuming when admitted.
-- One key is the plain decision; many are a batch of independent decisions,
-- each exact because the whole script runs atomically.
local out, stop = decide_each(read_now())
if not out then
  return stop
end
return out
