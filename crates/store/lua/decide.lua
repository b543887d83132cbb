-- Decides every key on its own, in order, each consuming when admitted.
-- One key is the plain decision; many are a batch of independent decisions,
-- each exact because the whole script runs atomically.
local now = read_now()
local margin = tonumber(ARGV[2])
local states, stop = read_states(3)
if not states then
  return stop
end
local out = {}
for i = 1, #KEYS do
  local at = 3 + (i - 1) * FIELDS
  local decide = ALGORITHMS[ARGV[at]]
  if not decide then
    return error('tollgate: unknown algorithm ' .. ARGV[at])
  end
  local key = KEYS[i]
  local state = states[key]
  local written, allowed, remaining, retry, reset = decide(
    key, state, now, tonumber(ARGV[at + 1]), true,
    ARGV[at + 2], ARGV[at + 3], ARGV[at + 4], ARGV[at + 5])
  if written and written ~= state then
    redis.call('SET', key, written, 'PX', int(reset + margin))
    states[key] = written
  end
  local o = (i - 1) * 4
  out[o + 1] = allowed and 1 or 0
  out[o + 2] = remaining
  out[o + 3] = retry
  out[o + 4] = reset
end
return out
