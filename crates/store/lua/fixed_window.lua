-- fixed_window (docs/design.md §3; Rust twin: crates/core/src/algorithm/fixed_window.rs)
-- state "W:count:last_ms": the count of window floor(last_ms / W).

-- The state's window length, count and clock.
local function fixed_window_read(key, state)
  local sw, sc, last = string.match(state, '^(%d+):(%d+):(%d+)$')
  if not sw then
    bad_state(key)
  end
  return tonumber(sw), tonumber(sc), tonumber(last)
end

ALGORITHMS.fixed_window = function(key, state, now, cost, consume, l_text, w_text)
  local limit, w = tonumber(l_text), tonumber(w_text)
  local count = 0
  local sw, sc, last
  if state then
    sw, sc, last = fixed_window_read(key, state)
    if now < last then
      now = last
    end
  end
  local index = idiv(now, w)
  if state then
    if sw == w then
      if idiv(last, sw) == index then
        count = sc
      end
    elseif (idiv(last, sw) + 1) * sw > now then
      -- A changed window length frees nothing before the old window ends.
      count = sc
    end
  end
  local allowed = cost <= limit and count <= limit - cost
  if allowed and consume then
    count = count + cost
  end
  local reset = (index + 1) * w - now
  local retry = 0
  if not allowed then
    if cost > limit then
      retry = -1
    else
      retry = reset
    end
  end
  local remaining = 0
  if count < limit then
    remaining = limit - count
  end
  return w_text .. ':' .. int(count) .. ':' .. int(now), allowed, remaining, retry, reset
end

-- Gives back up to `units` while the window of the take still counts
-- (Rust twin: fixed_window::give_back).
GIVE.fixed_window = function(key, state, now, units, taken, _, l_text, w_text)
  local w = tonumber(w_text)
  local sw, sc, last = fixed_window_read(key, state)
  if now < last then
    now = last
  end
  local index = idiv(now, w)
  if sw ~= w or idiv(last, w) ~= index or idiv(taken, w) ~= index then
    return nil, 0, 0
  end
  local given = units
  if given > sc then
    given = sc
  end
  return w_text .. ':' .. int(sc - given) .. ':' .. int(now), given, (index + 1) * w - now
end
