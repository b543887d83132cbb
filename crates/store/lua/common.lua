-- tollgate: helpers shared by every script (concatenated first).
--
-- Lua numbers are doubles: every quantity here stays an integer below 2^53,
-- where doubles are exact, and config validation rejects policies that
-- could leave that range. Numbers are never turned into text with `..` or
-- tostring (both print 14 significant digits); `int` prints them exactly.
--
-- ARGV[1]  the time in ms, or "" to read the store's own clock (TIME)
-- ARGV[2]  TTL margin in ms: a key lives `reset_after_ms + margin`
-- then six fields per key: algorithm, cost, three parameters and a scale
--   token_bucket, gcra:                      capacity C, n, p
--   fixed_window, sliding_window, sliding_log: limit L, window W, 0
--   concurrency:                             limit N, lease T, 0, and in
--                                            place of the scale the permit
--                                            an acquire would hold
--   the scale (gcra only, else ""): "" or the tag the policy's scale
--   registry gave the current scale, then ";tag:C:n:p" for each older
--   scale the caller resolved (see gcra.lua).
-- A gcra state written under a tag the call cannot resolve stops the call
-- before anything is written, with the error
--   TOLLGATESCALE <key index from 0>:<tag> ...
-- and the caller calls again with those scales resolved.
-- Each script returns four integers per key:
--   allowed (1/0), remaining, retry_after_ms (-1 for null), reset_after_ms.
-- decide_once.lua (a call under a request id) adds one more key, the id
-- record, last in KEYS, and four arguments after the fields; see there.

local EXACT = 9007199254740992 -- 2^53
local fmod = math.fmod
local tonumber = tonumber
local format = string.format
local ALGORITHMS = {}
-- Each algorithm's give-back (give_back.lua): (key, state, now, units,
-- taken_ms, full_at_ms, params...) -> written state, units given, reset.
local GIVE = {}
-- The keys holding states: all of KEYS, but for decide_once.lua's record.
local NKEYS = #KEYS

local function int(x)
  return format('%d', x)
end

-- floor(x / y) for integers 0 <= x, 0 < y below 2^53. fmod is exact, so
-- x - fmod(x, y) is an exact multiple of y and the division is exact.
local function idiv(x, y)
  return (x - fmod(x, y)) / y
end

-- ceil(x / y), same ranges.
local function cdiv(x, y)
  local r = fmod(x, y)
  if r == 0 then
    return x / y
  end
  return (x - r) / y + 1
end

-- floor(a * b / c) for integers 0 <= a < c, 0 <= b, all below 2^53 (the
-- result is below b). When a * b leaves the exact range, long division over
-- the bits of b keeps every intermediate below 2^53.
local function muldiv(a, b, c)
  local product = a * b
  if product < EXACT then
    return idiv(product, c)
  end
  local bits, x = {}, b
  while x > 0 do
    local bit = x % 2
    bits[#bits + 1] = bit
    x = (x - bit) / 2
  end
  local q, r = 0, 0 -- a * (bits read so far) = q * c + r, 0 <= r < c
  for i = #bits, 1, -1 do
    if r >= c - r then
      q, r = q * 2 + 1, r - (c - r)
    else
      q, r = q * 2, r + r
    end
    if bits[i] == 1 then
      if r >= c - a then
        q, r = q + 1, r - (c - a)
      else
        r = r + a
      end
    end
  end
  return q
end

-- Units counted at `old_p` units a token, in a scale of `p`: tokens are
-- preserved (rounded down, never up), capped at `capacity` tokens.
local function rescale(units, old_p, p, capacity)
  local tokens = idiv(units, old_p)
  if tokens >= capacity then
    return capacity * p
  end
  local carried = tokens * p + muldiv(units - tokens * old_p, p, old_p)
  if carried > capacity * p then
    return capacity * p
  end
  return carried
end

local function read_now()
  local given = ARGV[1]
  if given ~= '' then
    return tonumber(given)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + idiv(tonumber(t[2]), 1000)
end

local FIELDS = 6

-- The sixth field, parsed once per call for each distinct text: the
-- current tag (nil: none registered) and the older scales by tag.
local SCALES = {}
local function scales(text)
  local known = SCALES[text]
  if known then
    return known[1], known[2]
  end
  local current, rest = string.match(text, '^(%d*)(.*)$')
  local older = {}
  for t, c, n, p in string.gmatch(rest, ';(%d+):(%d+):(%d+):(%d+)') do
    older[tonumber(t)] = { tonumber(c), tonumber(n), tonumber(p) }
  end
  SCALES[text] = { tonumber(current), older }
  return tonumber(current), older
end

-- The tag of a gcra state in the integer form, else nil.
local function state_tag(state)
  if not state or string.find(state, ':', 1, true) then
    return nil
  end
  return tonumber(string.sub(state, -3))
end

-- A concurrency key's sorted set as its text state (concurrency.lua):
-- "<permit>@<expires>" in score order, joined by ","; false when empty.
local function read_permits(key)
  local pairs_read = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  if #pairs_read == 0 then
    return false
  end
  local parts = {}
  for i = 1, #pairs_read, 2 do
    parts[#parts + 1] = pairs_read[i] .. '@' .. pairs_read[i + 1]
  end
  return table.concat(parts, ',')
end

-- Every key's stored value, in KEYS order (false when absent): strings
-- in one MGET (each command a script sends costs more than a decision),
-- a concurrency key's sorted set read on its own.
local function read_values(first)
  local strings, at_string, values = {}, {}, {}
  for i = 1, NKEYS do
    if ARGV[first + (i - 1) * FIELDS] == 'concurrency' then
      values[i] = read_permits(KEYS[i])
    else
      strings[#strings + 1] = KEYS[i]
      at_string[#at_string + 1] = i
    end
  end
  if #strings == NKEYS then
    return redis.call('MGET', unpack(KEYS, 1, NKEYS))
  end
  if #strings > 0 then
    local got = redis.call('MGET', unpack(strings))
    for j = 1, #at_string do
      values[at_string[j]] = got[j]
    end
  end
  return values
end

-- Writes key i's new state (its fields at `first`), living `ttl` ms: a
-- string, or a concurrency key's permits back into its sorted set (none
-- left: the key goes).
local function store_state(first, i, state, ttl)
  local key = KEYS[i]
  if ARGV[first + (i - 1) * FIELDS] ~= 'concurrency' then
    redis.call('SET', key, state, 'PX', int(ttl))
    return
  end
  redis.call('DEL', key)
  local args = {}
  for permit, expires in string.gmatch(state, '(%x+)@(%d+)') do
    args[#args + 1] = expires
    args[#args + 1] = permit
  end
  if #args > 0 then
    redis.call('ZADD', key, unpack(args))
    redis.call('PEXPIRE', key, int(ttl))
  end
end

-- Reads every key once. Stops the call (before any write) when a gcra
-- item could meet a state in a scale it was not told: the one stored, or
-- one that another item of this call writes to the same key.
local function read_states(first)
  local states = {}
  local values = read_values(first)
  local one_scale, scale_text = true, nil
  for i = 1, NKEYS do
    states[KEYS[i]] = values[i]
    local at = first + (i - 1) * FIELDS
    if ARGV[at] == 'gcra' then
      if scale_text == nil then
        scale_text = ARGV[at + 5]
      elseif scale_text ~= ARGV[at + 5] then
        one_scale = false
      end
    end
  end
  if scale_text == nil then
    return states
  end
  -- Every tag that a gcra item could read at each key.
  local tags = {}
  for i = 1, NKEYS do
    local key = KEYS[i]
    if tags[key] == nil then
      tags[key] = {}
      local stored = state_tag(values[i])
      if stored then
        tags[key][stored] = true
      end
    end
    local at = first + (i - 1) * FIELDS
    -- With one scale text in the call, items write only its own tag.
    if not one_scale and ARGV[at] == 'gcra' then
      local current = scales(ARGV[at + 5])
      if current then
        tags[key][current] = true
      end
    end
  end
  local missing = {}
  for i = 1, NKEYS do
    local at = first + (i - 1) * FIELDS
    if ARGV[at] == 'gcra' then
      local current, older = scales(ARGV[at + 5])
      for tag in pairs(tags[KEYS[i]]) do
        if tag ~= current and not older[tag] then
          missing[#missing + 1] = int(i - 1) .. ':' .. int(tag)
        end
      end
    end
  end
  if #missing > 0 then
    return nil, redis.error_reply('TOLLGATESCALE ' .. table.concat(missing, ' '))
  end
  return states
end

local function bad_state(key)
  return error('tollgate: unreadable state at key ' .. key)
end

-- Decides every key on its own, in order, each consuming when admitted
-- (decide.lua, take.lua): four integers per key, or nil and the reply that
-- stops the call.
local function decide_each(now)
  local margin = tonumber(ARGV[2])
  local states, stop = read_states(3)
  if not states then
    return nil, stop
  end
  local out = {}
  for i = 1, #KEYS do
    local at = 3 + (i - 1) * FIELDS
    local decide = ALGORITHMS[ARGV[at]]
    if not decide then
      return nil, error('tollgate: unknown algorithm ' .. ARGV[at])
    end
    local key = KEYS[i]
    local state = states[key]
    local cost = tonumber(ARGV[at + 1])
    local written, allowed, remaining, retry, reset = decide(
      key, state, now, cost, true,
      ARGV[at + 2], ARGV[at + 3], ARGV[at + 4], ARGV[at + 5])
    -- A peek (cost 0) at an identity never seen creates no key: a read
    -- must not write, and a fresh state decides as an absent one does.
    -- Rust twin: MemoryStore::decide_at.
    if written and written ~= state and (state or cost > 0) then
      store_state(3, i, written, reset + margin)
      states[key] = written
    end
    local o = (i - 1) * 4
    out[o + 1] = allowed and 1 or 0
    out[o + 2] = remaining
    out[o + 3] = retry
    out[o + 4] = reset
  end
  return out
end

-- The room a bucket gives back into (Rust twin: Taken::span_ms): its own
-- room, at most the refill that fits before `full_at - 1`, which the state
-- a take left could not have reached since.
local function give_room(room, now, full_at, n)
  local span = full_at - 1 - now
  if span <= 0 then
    return 0
  end
  -- span * n leaves the exact range only when it is above the room.
  if span < cdiv(room, n) then
    return span * n
  end
  return room
end

