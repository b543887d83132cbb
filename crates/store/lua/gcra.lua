-- gcra (DESIGN.md §3; Rust twin: crates/core/src/algorithm/gcra.rs)
-- state "T:r:n:p:C": the theoretical arrival time tat = n*T + r (0 <= r < n),
-- T in ms, so it stays exact at any date; then the scale it was written in.
ALGORITHMS.gcra = function(key, state, now, cost, consume, c_text, n_text, p_text)
  local capacity, n, p = tonumber(c_text), tonumber(n_text), tonumber(p_text)
  local full = capacity * p
  local debt = 0
  if state then
    local t, r, sn, sp, sc = string.match(state, '^(%d+):(%d+):(%d+):(%d+):(%d+)$')
    if not t then
      bad_state(key)
    end
    t, r, sn, sp, sc = tonumber(t), tonumber(r), tonumber(sn), tonumber(sp), tonumber(sc)
    -- max(0, tat - n*now): zero once T < now, as r < n.
    local raw = 0
    if t >= now then
      raw = sn * (t - now) + r
    end
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
      written = int(now + idiv(after, n)) .. ':' .. int(fmod(after, n)) .. ':'
        .. n_text .. ':' .. p_text .. ':' .. c_text
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
