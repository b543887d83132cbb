-- sliding_log (docs/design.md §3; Rust twin: crates/core/src/algorithm/sliding_log.rs)
-- state "last_ms" then ";age:cost" per admitted millisecond, oldest first,
-- where age = last_ms - t. An entry counts while now < t + W.
ALGORITHMS.sliding_log = function(key, state, now, cost, consume, l_text, w_text)
  local limit, w = tonumber(l_text), tonumber(w_text)
  local times, costs = {}, {}
  local counted = 0
  if state then
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
  end
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
  local reset = 0
  if count > 0 then
    reset = times[count] + w - now
  end
  local remaining = 0
  if counted < limit then
    remaining = limit - counted
  end
  local parts = { int(now) }
  for i = 1, count do
    parts[i + 1] = ';' .. int(now - times[i]) .. ':' .. int(costs[i])
  end
  return table.concat(parts), allowed, remaining, retry, reset
end

-- Gives back up to `units` from the entry of the take's millisecond while
-- it counts (Rust twin: sliding_log::give_back).
GIVE.sliding_log = function(key, state, now, units, taken, _, l_text, w_text)
  local w = tonumber(w_text)
  local last_text, rest = string.match(state, '^(%d+)(.*)$')
  if not last_text then
    bad_state(key)
  end
  local last = tonumber(last_text)
  if now < last then
    now = last
  end
  local given = 0
  local parts = { int(now) }
  local newest = nil
  for age, c in string.gmatch(rest, ';(%d+):(%d+)') do
    local t, cost = last - tonumber(age), tonumber(c)
    if t + w > now then
      if t == taken and given == 0 then
        given = math.min(units, cost)
        cost = cost - given
      end
      if cost > 0 then
        parts[#parts + 1] = ';' .. int(now - t) .. ':' .. int(cost)
        newest = t
      end
    end
  end
  local reset = 0
  if newest then
    reset = newest + w - now
  end
  return table.concat(parts), given, reset
end
