-- Decides one key as decide.lua does and answers the store's clock as a
-- fifth integer: units a hot-lease block consumes ahead of their use can
-- then be given back exactly (give_back.lua).
local now = read_now()
local out, stop = decide_each(now)
if not out then
  return stop
end
out[#out + 1] = now
return out
