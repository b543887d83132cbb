-- gcra (docs/design.md §3; Rust twin: crates/core/src/algorithm/gcra.rs)
-- The state is the theoretical arrival time tat (debt = tat - n*now), in
-- one of two forms:
-- - an integer: the digits of tat, then three digits tagging its scale in
--   the policy's scale registry ("1796032468745" .. "000"). Redis keeps it
--   as a bare integer inside the key's object, the smallest state of any
--   algorithm (bytes per key: docs/redis.md, Figures). Used when the
--   policy's scale has a tag and tat < 2^53.
-- - text "T:r:n:p:C": tat = n*T + r (0 <= r < n), T in ms, exact at any
--   date, with the scale written out. Used otherwise.
-- Either way the scale is known, so a limit change carries over. An older
-- scale whose registry entry was lost reads as {0, 0, 0}: the bucket is
-- taken as empty, which never admits more.
-- The state's debt at `now` (max(0, tat - n*now)) and the scale it was
-- written in (C, n, p).
local function gcra_read(key, state, now, tag, older, capacity, n, p)
  local raw, sn, sp, sc
  if string.find(state, ':', 1, true) then
    local t, r
    t, r, sn, sp, sc = string.match(state, '^(%d+):(%d+):(%d+):(%d+):(%d+)$')
    if not t then
      bad_state(key)
    end
    t, r, sn, sp, sc = tonumber(t), tonumber(r), tonumber(sn), tonumber(sp), tonumber(sc)
    -- max(0, tat - n*now): zero once T < now, as r < n.
    raw = 0
    if t >= now then
      raw = sn * (t - now) + r
    end
  else
    local tag_text = string.sub(state, -3)
    local written_tag, tat = tonumber(tag_text), tonumber(string.sub(state, 1, -4))
    if not written_tag or not tat then
      bad_state(key)
    end
    if written_tag == tag then
      sc, sn, sp = capacity, n, p
    else
      local old = older[written_tag]
      if not old then
        return error('tollgate: unresolved gcra scale ' .. tag_text .. ' at key ' .. key)
      end
      sc, sn, sp = old[1], old[2], old[3]
    end
    -- tat < 2^53, so a floor beyond the exact range leaves no debt.
    local floor = sn * now
    raw = 0
    if tat > floor then
      raw = tat - floor
    end
  end
  return raw, sc, sn, sp
end

-- The state holding `debt` at `now`: the integer form when it fits.
local function gcra_written(now, debt, tag, c_text, n_text, n, p_text)
  local base = n * now
  if tag and base < EXACT and debt < EXACT - base then
    return format('%d%03d', base + debt, tag)
  end
  return int(now + idiv(debt, n)) .. ':' .. int(fmod(debt, n)) .. ':'
    .. n_text .. ':' .. p_text .. ':' .. c_text
end

ALGORITHMS.gcra = function(key, state, now, cost, consume, c_text, n_text, p_text, scale_text)
  local capacity, n, p = tonumber(c_text), tonumber(n_text), tonumber(p_text)
  local tag, older = scales(scale_text)
  local full = capacity * p
  local debt = 0
  if state then
    local raw, sc, sn, sp = gcra_read(key, state, now, tag, older, capacity, n, p)
    if sn == n and sp == p and sc == capacity then
      if raw >= EXACT then
        return error('tollgate: gcra clock stepped back beyond the exact range at key ' .. key)
      end
      debt = raw
    else
      -- A changed policy: the tokens left are preserved (rounded down,
      -- capped at the new capacity).
      local old_full = sc * sp
      local units = 0
      if raw < old_full and sp ~= 0 then
        units = rescale(old_full - raw, sp, p, capacity)
      end
      debt = full - units
    end
  end
  local allowed = cost <= capacity and debt <= full - cost * p
  local after = debt
  local written = false
  if allowed and consume then
    after = debt + cost * p
    -- A peek or a rejection writes nothing.
    if cost > 0 then
      written = gcra_written(now, after, tag, c_text, n_text, n, p_text)
    end
  end
  local remaining
  if after <= full then
    remaining = idiv(full - after, p)
  else
    remaining = -cdiv(after - full, p)
  end
  local retry = 0
  if not allowed then
    if cost > capacity then
      retry = -1
    else
      retry = cdiv(debt - (full - cost * p), n)
    end
  end
  return written, allowed, remaining, retry, cdiv(after, n)
end

-- Gives back up to `units` tokens: the token bucket's rule on the debt
-- (Rust twin: gcra::give_back). A state in another scale takes nothing.
GIVE.gcra = function(key, state, now, units, _, full_at, c_text, n_text, p_text, scale_text)
  local capacity, n, p = tonumber(c_text), tonumber(n_text), tonumber(p_text)
  local tag, older = scales(scale_text)
  local debt, sc, sn, sp = gcra_read(key, state, now, tag, older, capacity, n, p)
  if sn ~= n or sp ~= p or sc ~= capacity or debt >= EXACT then
    return nil, 0, 0
  end
  local given = idiv(give_room(debt, now, full_at, n), p)
  if given > units then
    given = units
  end
  local after = debt - given * p
  return gcra_written(now, after, tag, c_text, n_text, n, p_text), given, cdiv(after, n)
end

-- A refund: the token bucket's refund on the debt (Rust twin: gcra::refund).
GIVE.gcra_refund = function(key, state, now, units, _, _, c_text, n_text, p_text, scale_text)
  local capacity, n, p = tonumber(c_text), tonumber(n_text), tonumber(p_text)
  local tag, older = scales(scale_text)
  local debt, sc, sn, sp = gcra_read(key, state, now, tag, older, capacity, n, p)
  if sn ~= n or sp ~= p or sc ~= capacity or debt >= EXACT then
    return nil, 0, 0
  end
  local back = debt
  if units < cdiv(debt, p) then
    back = units * p
  end
  local after = debt - back
  return gcra_written(now, after, tag, c_text, n_text, n, p_text), cdiv(back, p), cdiv(after, n)
end

