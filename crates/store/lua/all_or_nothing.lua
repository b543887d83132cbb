-- Decides the NKEYS keys all-or-nothing: nothing is consumed unless every
-- key admits. `mode` is one of:
--   consume  the all-or-nothing decision;
--   probe    the same verdict, consuming nothing (a rejected call's writes);
--   verdict  the same verdict, writing nothing (the first phase across
--            Cluster slots, whose outcome decides what the others do).
-- `peek` decides every key at cost 0 (a request id's replay). The six
-- fields per key start at ARGV[4].
-- A key named twice sees its own earlier consumption, and a check that
-- failed only because an earlier check of the call consumed from its key
-- keeps that failure, so the call still reads rejected. Each key is
-- written once, its TTL following its last decision.
-- Returns the four integers per key and whether every key admitted, or
-- nil and the error reply to return.
local function all_or_nothing(now, mode, peek)
  local margin = tonumber(ARGV[2])
  local consume = mode == 'consume'
  local write = mode ~= 'verdict'
  local stored, stop = read_states(4)
  if not stored then
    return nil, stop
  end
  local states = {}
  local out = {}
  local all = true

  -- Decides every key; `keep` marks decisions already final (failures of
  -- the consuming pass), which the probing pass leaves in place.
  local function pass(intent, keep)
    for i = 1, NKEYS do
      local key = KEYS[i]
      if states[key] == nil then
        states[key] = stored[key]
      end
    end
    all = true
    for i = 1, NKEYS do
      local at = 4 + (i - 1) * FIELDS
      local decide = ALGORITHMS[ARGV[at]]
      if not decide then
        return error('tollgate: unknown algorithm ' .. ARGV[at])
      end
      local key = KEYS[i]
      local cost = peek and 0 or tonumber(ARGV[at + 1])
      local written, allowed, remaining, retry, reset =
        decide(key, states[key], now, cost, intent,
          ARGV[at + 2], ARGV[at + 3], ARGV[at + 4], ARGV[at + 5])
      if written then
        states[key] = written
      end
      all = all and allowed
      local o = (i - 1) * 4
      if not (keep and keep[i]) then
        out[o + 1] = allowed and 1 or 0
        out[o + 2] = remaining
        out[o + 3] = retry
        out[o + 4] = reset
      end
    end
  end

  -- Both modes first decide consuming (on copies), so a check that fails
  -- only after an earlier one consumed from its key fails in a probe too.
  -- A probe, or a consuming call that was not all admitted, then decides
  -- again from the stored states without consuming, and only that is
  -- written.
  pass(true, nil)
  if not consume or not all then
    -- Start again from the stored states, consuming nothing.
    local failed = {}
    for i = 1, NKEYS do
      failed[i] = out[(i - 1) * 4 + 1] == 0
    end
    states = {}
    pass(false, failed)
  end
  for i = NKEYS, write and 1 or NKEYS + 1, -1 do
    local key = KEYS[i]
    local state = states[key]
    if state and state ~= stored[key] then
      store_state(4, i, state, out[(i - 1) * 4 + 4] + margin)
    end
    states[key] = false
  end
  return out, consume and all
end
