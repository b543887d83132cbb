-- token_bucket (docs/design.md §3; Rust twin: crates/core/src/algorithm/token_bucket.rs)
-- state "units:last_ms:p": units in the scale of p units a token.
ALGORITHMS.token_bucket = function(key, state, now, cost, consume, c_text, n_text, p_text)
  local capacity, n, p = tonumber(c_text), tonumber(n_text), tonumber(p_text)
  local full = capacity * p
  local units, last = full, now
  if state then
    local u, l, sp = string.match(state, '^(%d+):(%d+):(%d+)$')
    if not u then
      bad_state(key)
    end
    units, last, sp = tonumber(u), tonumber(l), tonumber(sp)
    if sp ~= p and sp ~= 0 then
      units = rescale(units, sp, p, capacity)
    elseif units > full then
      units = full
    end
  end
  if now < last then
    now = last
  end
  -- Refill capped at the capacity before the multiplication can grow.
  local avail = full
  if units < full and now - last < cdiv(full - units, n) then
    avail = units + (now - last) * n
  end
  local allowed = cost <= capacity and cost * p <= avail
  local left = avail
  if allowed and consume then
    left = avail - cost * p
  end
  local retry = 0
  if not allowed then
    if cost > capacity then
      retry = -1
    else
      retry = cdiv(cost * p - avail, n)
    end
  end
  local reset = cdiv(full - left, n)
  return int(left) .. ':' .. int(now) .. ':' .. p_text, allowed, idiv(left, p), retry, reset
end

-- A give-back's or a refund's view of the bucket at `now`: the units held
-- (refilled, never past full), the clamped time and the full bucket; nil
-- when the state was written at another scale (nothing goes back).
local function token_bucket_held(key, state, now, c_text, n_text, p_text)
  local capacity, n, p = tonumber(c_text), tonumber(n_text), tonumber(p_text)
  local u, l, sp = string.match(state, '^(%d+):(%d+):(%d+)$')
  if not u then
    bad_state(key)
  end
  local held, last = tonumber(u), tonumber(l)
  if tonumber(sp) ~= p then
    return nil
  end
  if now < last then
    now = last
  end
  local full = capacity * p
  local avail = full
  if held < full and now - last < cdiv(full - held, n) then
    avail = held + (now - last) * n
  end
  return avail, now, full, n, p
end

-- Gives back up to `units` tokens (Rust twin: token_bucket::give_back).
GIVE.token_bucket = function(key, state, now, units, _, full_at, c_text, n_text, p_text)
  local avail, full, n, p
  avail, now, full, n, p = token_bucket_held(key, state, now, c_text, n_text, p_text)
  if not avail then
    return nil, 0, 0
  end
  local given = idiv(give_room(full - avail, now, full_at, n), p)
  if given > units then
    given = units
  end
  local left = avail + given * p
  return int(left) .. ':' .. int(now) .. ':' .. p_text, given, cdiv(full - left, n)
end

-- A refund: up to `units` tokens back, never past full, a fraction of a
-- token included (Rust twin: token_bucket::refund).
GIVE.token_bucket_refund = function(key, state, now, units, _, _, c_text, n_text, p_text)
  local avail, full, n, p
  avail, now, full, n, p = token_bucket_held(key, state, now, c_text, n_text, p_text)
  if not avail then
    return nil, 0, 0
  end
  local back = full - avail
  -- units * p leaves the exact range only when it is above the room.
  if units < cdiv(back, p) then
    back = units * p
  end
  local left = avail + back
  return int(left) .. ':' .. int(now) .. ':' .. p_text, cdiv(back, p), cdiv(full - left, n)
end

