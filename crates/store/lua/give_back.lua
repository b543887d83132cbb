-- Gives back units of a hot-lease block that were never used
-- (docs/config.md, hot_lease), as far as the key's state can take them
-- back exactly. Rust twin: Limits::give_back (crates/core/src/algorithm).
-- KEYS[1] the state. ARGV[1] now, ARGV[2] margin, ARGV[3] the take as
-- "taken_ms:full_at_ms" (the store's clock at the take, and when the state
-- it left would have been whole: that clock plus its reset), ARGV[4..9]
-- the key's fields (the cost is the units to give back); a refund's take
-- is not known (Taken::REFUND). Answers { the units given back }.
local now = read_now()
local margin = tonumber(ARGV[2])
local taken, full_at = string.match(ARGV[3], '^(%d+):(%d+)$')
-- Taken::REFUND: both times u64::MAX, which no take has.
local refund = ARGV[3] == '18446744073709551615:18446744073709551615'
if refund then
  -- A refund's take has no known time (Rust twin: Taken::REFUND): a take
  -- now that could never have filled up; a log gives from its newest.
  taken, full_at = now, 2 * EXACT
elseif not taken then
  return error('tollgate: unreadable take ' .. ARGV[3])
end
local states, stop = read_states(4)
if not states then
  return stop
end
local key = KEYS[1]
local state = states[key]
if not state then
  -- Expired or reset: what it held is already free.
  return { 0 }
end
local name = ARGV[4]
if refund and (name == 'sliding_log' or name == 'token_bucket' or name == 'gcra') then
  name = name .. '_refund'
end
local give = GIVE[name]
if not give then
  return error('tollgate: unknown algorithm ' .. ARGV[4])
end
local written, given, reset = give(key, state, now, tonumber(ARGV[5]),
  tonumber(taken), tonumber(full_at), ARGV[6], ARGV[7], ARGV[8], ARGV[9])
if given > 0 then
  redis.call('SET', key, written, 'PX', int(reset + margin))
end
return { given }
