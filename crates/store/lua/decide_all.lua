-- Decides all keys all-or-nothing (all_or_nothing.lua); ARGV[3] is the mode.
local out, stop = all_or_nothing(read_now(), ARGV[3], false)
if not out then
  return stop
end
return out
