-- sliding_window (docs/design.md §3; Rust twin: crates/core/src/algorithm/sliding_window.rs)
-- state "W:prev:curr:last_ms": counts of window floor(last_ms / W) and the one before.

-- The state's window length, counts and clock.
local function sliding_window_read(key, state)
  local sw, sp, sc, last = string.match(state, '^(%d+):(%d+):(%d+):(%d+)$')
  if not sw then
    bad_state(key)
  end
  return tonumber(sw), tonumber(sp), tonumber(sc), tonumber(last)
end

-- The (prev, curr) counts that apply in window `index`, for a state of the
-- same window length.
local function sliding_window_counts(sp, sc, last, w, index)
  local gap = index - idiv(last, w)
  if gap == 0 then
    return sp, sc
  elseif gap == 1 then
    return sc, 0
  end
  return 0, 0
end

ALGORITHMS.sliding_window = function(key, state, now, cost, consume, l_text, w_text)
  local limit, w = tonumber(l_text), tonumber(w_text)
  local prev, curr = 0, 0
  local sw, sp, sc, last
  if state then
    sw, sp, sc, last = sliding_window_read(key, state)
    if now < last then
      now = last
    end
  end
  local index = idiv(now, w)
  if state then
    if sw == w then
      prev, curr = sliding_window_counts(sp, sc, last, w, index)
    else
      -- A changed window length: what was counted stays counted while recent.
      local longer = sw
      if w > longer then
        longer = w
      end
      if last + 2 * longer > now then
        curr = sp + sc
      end
    end
  end
  local start = index * w
  local elapsed = now - start
  local weighted_prev = prev * (w - elapsed)
  local capacity = limit * w
  -- curr + cost <= limit is implied by the weighted test; checking it first
  -- keeps the products below 2^53.
  local allowed = cost <= limit and curr <= limit - cost
    and weighted_prev + (curr + cost) * w <= capacity
  if allowed and consume then
    curr = curr + cost
  end
  local remaining = 0
  if curr <= limit then
    local used = weighted_prev + curr * w
    if used < capacity then
      remaining = idiv(capacity - used, w)
    end
  end
  local retry = 0
  if not allowed then
    if cost > limit then
      retry = -1
    elseif prev > 0 and curr <= limit - cost then
      -- In this window prev's weight fades: prev*(w - e') <= L*w - (curr + cost)*w.
      local max_weight = idiv(capacity - (curr + cost) * w, prev)
      local left = w - elapsed
      if max_weight > left then
        max_weight = left
      end
      retry = left - max_weight
    else
      -- In the next window curr fades: curr*(w - e') <= (L - cost)*w.
      retry = start + w - now
      if curr > 0 then
        local max_weight = idiv((limit - cost) * w, curr)
        if max_weight > w then
          max_weight = w
        end
        retry = retry + (w - max_weight)
      end
    end
  end
  local reset = 0
  if curr > 0 then
    reset = start + 2 * w - now
  elseif prev > 0 then
    reset = start + w - now
  end
  return w_text .. ':' .. int(prev) .. ':' .. int(curr) .. ':' .. int(now),
    allowed, remaining, retry, reset
end

-- Gives back up to `units` from the count of the take's window, while it is
-- the current or the previous one (Rust twin: sliding_window::give_back).
GIVE.sliding_window = function(key, state, now, units, taken, _, l_text, w_text)
  local w = tonumber(w_text)
  local sw, sp, sc, last = sliding_window_read(key, state)
  if sw ~= w then
    return nil, 0, 0
  end
  if now < last then
    now = last
  end
  local index = idiv(now, w)
  local prev, curr = sliding_window_counts(sp, sc, last, w, index)
  local given = 0
  local back = index - idiv(taken, w)
  if back == 0 then
    given = math.min(units, curr)
    curr = curr - given
  elseif back == 1 then
    given = math.min(units, prev)
    prev = prev - given
  end
  local start = index * w
  local reset = 0
  if curr > 0 then
    reset = start + 2 * w - now
  elseif prev > 0 then
    reset = start + w - now
  end
  return w_text .. ':' .. int(prev) .. ':' .. int(curr) .. ':' .. int(now), given, reset
end
