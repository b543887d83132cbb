-- Decides every key on its own, in order, as decide.lua, each under its
-- own request id (concurrent single checks batched into one call).
-- KEYS: the N states, then their N id records (record.lua). ARGV: as
-- decide.lua, then after the fields four per key: the id, its request's
-- digest (record.lua), the retry window in ms and the most ids a record
-- keeps.
-- Returns five integers per key: decide.lua's four, then 0 (decided; the
-- id recorded when admitted), 1 (replayed: a peek, admitted, nothing
-- consumed) or 2 (the id was recorded for another request: nothing
-- decided or written).
NKEYS = #KEYS / 2
local now = read_now()
local margin = tonumber(ARGV[2])
local states, stop = read_states(3)
if not states then
  return stop
end
local out = {}
for i = 1, NKEYS do
  local at = 3 + (i - 1) * FIELDS
  local decide = ALGORITHMS[ARGV[at]]
  if not decide then
    return error('tollgate: unknown algorithm ' .. ARGV[at])
  end
  local key, record = KEYS[i], KEYS[NKEYS + i]
  local ids = 3 + NKEYS * FIELDS + (i - 1) * 4
  local id, request = ARGV[ids], ARGV[ids + 1]
  local known = recall(record, id, request, now)
  local o = (i - 1) * 5
  if known == false then
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = 0, 0, 0, 0, 2
  else
    local cost = known and 0 or tonumber(ARGV[at + 1])
    local state = states[key]
    local written, allowed, remaining, retry, reset = decide(
      key, state, now, cost, true,
      ARGV[at + 2], ARGV[at + 3], ARGV[at + 4], ARGV[at + 5])
    -- A peek at an identity never seen creates no key (see decide_each).
    if written and written ~= state and (state or cost > 0) then
      store_state(3, i, written, reset + margin)
      states[key] = written
    end
    if known then
      allowed, retry = true, 0
    elseif allowed then
      remember(record, id, request, now, tonumber(ARGV[ids + 2]), tonumber(ARGV[ids + 3]))
    end
    out[o + 1] = allowed and 1 or 0
    out[o + 2] = remaining
    out[o + 3] = retry
    out[o + 4] = reset
    out[o + 5] = known and 1 or 0
  end
end
return out
