-- sliding_log (docs/design.md §3; Rust twin: crates/core/src/algorithm/sliding_log.rs)
-- state "last_ms@ref:count:counted" then ";age:cost" per logged time,
-- oldest first, where t = ref - age (negative for a time after ref): the
-- header's ref does not move with the key's clock, so a call that drops
-- no entry rewrites the header and keeps the entries' text as it is, and
-- count and counted spare it a parse. A state of an earlier version,
-- "last_ms" then ";age:cost" with ref = last_ms, is read the slow way.
-- An entry counts while now < t + W. A log holds each request at its
-- millisecond while it has fewer than LOG_EXACT entries, else at the end
-- of its bucket of q = ceil(W / LOG_EXACT) ms: at most LOG_MAX entries.
local LOG_EXACT = 64
local LOG_MAX = 2 * LOG_EXACT + 1

-- ceil(t / q) * q: the end of t's bucket (t itself on a boundary).
local function bucket_end(t, q)
  return cdiv(t, q) * q
end

-- The header and entries' text of a state, or nil for an earlier format.
local function sliding_log_header(state)
  local last, ref, count, counted, rest =
    string.match(state, '^(%d+)@(%d+):(%d+):(%d+)(.*)$')
  if not last then
    return nil
  end
  return tonumber(last), tonumber(ref), tonumber(count), tonumber(counted), rest
end

-- The entries that still count at `now` (the key's clock never runs back:
-- `now` comes back clamped to it), their times, costs and sum.
local function sliding_log_read(key, state, now, w)
  local times, costs = {}, {}
  local counted = 0
  if not state then
    return now, times, costs, counted
  end
  local last, ref, _, _, rest = sliding_log_header(state)
  if not last then
    local last_text
    last_text, rest = string.match(state, '^(%d+)(.*)$')
    if not last_text then
      bad_state(key)
    end
    last = tonumber(last_text)
    ref = last
  end
  if now < last then
    now = last
  end
  for age, c in string.gmatch(rest, ';(-?%d+):(%d+)') do
    local t = ref - tonumber(age)
    -- Entries that aged out are dropped.
    if t + w > now then
      local cost = tonumber(c)
      times[#times + 1] = t
      costs[#costs + 1] = cost
      counted = counted + cost
    end
  end
  return now, times, costs, counted
end

-- The state holding the entries at `now` (ref = now), and when the newest
-- ages out.
local function sliding_log_written(now, times, costs, w)
  local parts = { '' }
  local newest = nil
  local count, counted = 0, 0
  for i = 1, #times do
    if costs[i] > 0 then
      parts[#parts + 1] = ';' .. int(now - times[i]) .. ':' .. int(costs[i])
      newest = times[i]
      count = count + 1
      counted = counted + costs[i]
    end
  end
  parts[1] = int(now) .. '@' .. int(now) .. ':' .. int(count) .. ':' .. int(counted)
  local reset = 0
  if newest then
    reset = newest + w - now
  end
  return table.concat(parts), reset
end

-- Every entry moved to its bucket's end, equal times merged: later, never
-- earlier. For a full log (or one written before logs were bounded), so
-- the entry a decision may add keeps it within LOG_MAX.
local function coalesce(times, costs, q)
  local t2, c2 = {}, {}
  local n = 0
  for i = 1, #times do
    local at = bucket_end(times[i], q)
    if n > 0 and t2[n] == at then
      c2[n] = c2[n] + costs[i]
    else
      n = n + 1
      t2[n], c2[n] = at, costs[i]
    end
  end
  return t2, c2
end

-- The decision without parsing the entries, when the state allows it: a
-- current-format state from which no entry ages out, that is not full, and
-- a decision that admits (a rejection's wait needs the entries). Returns
-- nil otherwise. Decides exactly as the full path below.
local function sliding_log_fast(state, now, cost, consume, limit, w)
  if not state then
    return nil
  end
  local last, ref, count, counted, rest = sliding_log_header(state)
  if not last or count == 0 or count >= LOG_MAX then
    return nil
  end
  if now < last then
    now = last
  end
  local oldest_age = string.match(rest, '^;(-?%d+):')
  local newest_age, newest_cost = string.match(rest, ';(-?%d+):(%d+)$')
  if not oldest_age or not newest_age or ref - tonumber(oldest_age) + w <= now then
    return nil
  end
  if not (cost <= limit and counted <= limit - cost) then
    return nil
  end
  local newest = ref - tonumber(newest_age)
  if consume and cost > 0 then
    local at = now
    if count >= LOG_EXACT then
      at = bucket_end(now, cdiv(w, LOG_EXACT))
    end
    if newest > at then
      at = newest
    end
    if newest == at then
      local merged = ';' .. newest_age .. ':' .. int(tonumber(newest_cost) + cost)
      rest = string.sub(rest, 1, #rest - #newest_age - #newest_cost - 2) .. merged
    else
      rest = rest .. ';' .. int(ref - at) .. ':' .. int(cost)
      count = count + 1
      newest = at
    end
    counted = counted + cost
  end
  local written = int(now) .. '@' .. int(ref) .. ':' .. int(count) .. ':' .. int(counted) .. rest
  local remaining = 0
  if counted < limit then
    remaining = limit - counted
  end
  return written, true, remaining, 0, newest + w - now
end

ALGORITHMS.sliding_log = function(key, state, now, cost, consume, l_text, w_text)
  local limit, w = tonumber(l_text), tonumber(w_text)
  local fast_written, fast_allowed, fast_remaining, fast_retry, fast_reset =
    sliding_log_fast(state, now, cost, consume, limit, w)
  if fast_written then
    return fast_written, fast_allowed, fast_remaining, fast_retry, fast_reset
  end
  local q = cdiv(w, LOG_EXACT)
  local times, costs, counted
  now, times, costs, counted = sliding_log_read(key, state, now, w)
  if #times >= LOG_MAX then
    times, costs = coalesce(times, costs, q)
  end
  local allowed = cost <= limit and counted <= limit - cost
  local count = #times
  if allowed and consume and cost > 0 then
    -- At its millisecond while the log is short, else at its bucket's end;
    -- never before the newest entry.
    local at = now
    if count >= LOG_EXACT then
      at = bucket_end(now, q)
    end
    if count > 0 and times[count] > at then
      at = times[count]
    end
    if count > 0 and times[count] == at then
      costs[count] = costs[count] + cost
    else
      count = count + 1
      times[count], costs[count] = at, cost
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

-- Gives back up to `units` from the entry of the take while it counts
-- (Rust twin: sliding_log::give_back): the take's own millisecond first,
-- else its bucket's end, where a long log logged it.
GIVE.sliding_log = function(key, state, now, units, taken, _, l_text, w_text)
  local w = tonumber(w_text)
  local times, costs
  now, times, costs = sliding_log_read(key, state, now, w)
  local given = 0
  local found = false
  for _, at in ipairs({ taken, bucket_end(taken, cdiv(w, LOG_EXACT)) }) do
    for i = 1, #times do
      if times[i] == at then
        given = math.min(units, costs[i])
        costs[i] = costs[i] - given
        found = true
        break
      end
    end
    if found then
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
