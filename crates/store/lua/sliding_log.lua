-- sliding_log (docs/design.md §3; Rust twin: crates/core/src/algorithm/sliding_log.rs)
-- state "last_ms" then ";age:cost" per admitted millisecond, oldest first,
-- where age = last_ms - t. An entry counts while now < t + W.
-- The entries that still count at `now` (the key's clock never runs back:
-- `now` comes back clamped to it), their times, costs and sum.
local function sliding_log_read(key, state, now, w)
  local times, costs = {}, {}
  local counted = 0
  if not state then
    return now, times, costs, counted
  end
  local last_text, rest = string.match(state, '^(%d+)(.*)$')
  if not last_text then
    bad_state(key)
  end
  local last = tonumber(last_text)
  if now < last then
    now = last
  end
  for age, c in string.gmatch(rest, ';(%d+):(%d+)') do
    local t = last - tonumber(age)
    -- Entries that aged out are dropped.
    if t + w > now then
      times[#times + 1] = t
      costs[#costs + 1] = tonumber(c)
      counted = counted + tonumber(c)
    end
  end
  return now, times, costs, counted
end

-- The state holding the entries at `now`, and when the newest ages out.
local function sliding_log_written(now, times, costs, w)
  local parts = { int(now) }
  local newest = nil
  for i = 1, #times do
    if costs[i] > 0 then
      parts[#parts + 1] = ';' .. int(now - times[i]) .. ':' .. int(costs[i])
      newest = times[i]
    end
  end
  local reset = 0
  if newest then
    reset = newest + w - now
  end
  return table.concat(parts), reset
end

ALGORITHMS.sliding_log = function(key, state, now, cost, consume, l_text, w_text)
  local limit, w = tonumber(l_text), tonumber(w_text)
  local times, costs, counted
  now, times, costs, counted = sliding_log_read(key, state, now, w)
  local allowed = cost <= limit and counted <= limit - cost
  local count = #times
  if allowed and consume and cost > 0 then
    if count > 0 and times[count] == now then
      costs[count] = costs[count] + cost
    else
      count = count + 1
      times[count], costs[count] = now, cost
    end
    counted = counted + cost
  end
  local retry = 0
  if not allowed then
    if cost > limit then
      retry = -1
    else
      -- Oldest entries age out first: find the one whose leaving makes room.
      local left = counted
      for i = 1, count do
        left = left - costs[i]
        if left <= limit - cost then
          retry = times[i] + w - now
          break
        end
      end
    end
  end
  local remaining = 0
  if counted < limit then
    remaining = limit - counted
  end
  local written, reset = sliding_log_written(now, times, costs, w)
  return written, allowed, remaining, retry, reset
end

-- Gives back up to `units` from the entry of the take's millisecond while
-- it counts (Rust twin: sliding_log::give_back).
GIVE.sliding_log = function(key, state, now, units, taken, _, l_text, w_text)
  local w = tonumber(w_text)
  local times, costs
  now, times, costs = sliding_log_read(key, state, now, w)
  local given = 0
  for i = 1, #times do
    if times[i] == taken then
      given = math.min(units, costs[i])
      costs[i] = costs[i] - given
      break
    end
  end
  local written, reset = sliding_log_written(now, times, costs, w)
  return written, given, reset
end

-- A refund: gives back up to `units` from the newest entries that still
-- count, newest first (Rust twin: sliding_log::refund).
GIVE.sliding_log_refund = function(key, state, now, units, _, _, l_text, w_text)
  local w = tonumber(w_text)
  local times, costs
  now, times, costs = sliding_log_read(key, state, now, w)
  local given = 0
  local i = #times
  while given < units and i >= 1 do
    local take = math.min(units - given, costs[i])
    costs[i] = costs[i] - take
    given = given + take
    i = i - 1
  end
  local written, reset = sliding_log_written(now, times, costs, w)
  return written, given, reset
end
