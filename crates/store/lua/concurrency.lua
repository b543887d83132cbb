-- concurrency (docs/design.md §3; Rust twin: crates/core/src/algorithm/concurrency.rs)
-- A sorted set a key: each member a held permit's id (16 hex digits),
-- its score the ms its lease ends, on the store's clock. read_states
-- reads it as the text "<permit>@<expires>,..." (in score order), the
-- transition decides on that text as on any state, and store_state
-- writes it back to the set. The permit an acquire would hold is the
-- item's sixth field.

-- The held permits of a state that are still held at `now`.
local function concurrency_held(state, now)
  local held = {}
  if state then
    for permit, expires in string.gmatch(state, '(%x+)@(%d+)') do
      local at = tonumber(expires)
      if at > now then
        held[#held + 1] = { permit, at }
      end
    end
  end
  return held
end

local function concurrency_text(held)
  local parts = {}
  for i = 1, #held do
    parts[i] = held[i][1] .. '@' .. int(held[i][2])
  end
  return table.concat(parts, ',')
end

ALGORITHMS.concurrency = function(key, state, now, cost, consume, l_text, lease_text, _, permit)
  local limit, lease = tonumber(l_text), tonumber(lease_text)
  local held = concurrency_held(state, now)
  local again = nil
  for i = 1, #held do
    if held[i][1] == permit then
      again = i
    end
  end
  local allowed
  if cost == 0 then
    allowed = true
  elseif cost == 1 then
    allowed = again ~= nil or #held < limit
  else
    allowed = false
  end
  if allowed and consume and cost == 1 then
    -- A permit already held (a retry under its request id) is held again
    -- from now: the same permit, not a second one.
    if again then
      held[again][2] = now + lease
    else
      held[#held + 1] = { permit, now + lease }
    end
  end
  local earliest, latest = nil, nil
  for i = 1, #held do
    local at = held[i][2]
    if earliest == nil or at < earliest then
      earliest = at
    end
    if latest == nil or at > latest then
      latest = at
    end
  end
  local retry = 0
  if not allowed then
    if cost > 1 then
      retry = -1
    else
      -- Full: the first lease to end frees one (a release may come sooner).
      retry = earliest - now
    end
  end
  local remaining = 0
  if #held < limit then
    remaining = limit - #held
  end
  local reset = 0
  if latest then
    reset = latest - now
  end
  return concurrency_text(held), allowed, remaining, retry, reset
end

-- Permits are released by id (release.lua), never given back as units.
GIVE.concurrency = function(_, state, _, _, _, _, _, _)
  return state, 0, 0
end
