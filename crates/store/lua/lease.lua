-- tollgate: the ledger of `leased` policies (docs/config.md, Leased shares). Redis
-- is the coordinator: this script, on Redis's clock (TIME), is the whole
-- state machine; instances only ask it, each on its renewal period, for
-- every identity of one policy that holds a grant or wants one.
--
-- The ledger is one hash a (policy, identity), each with its own TTL, and
-- one epoch key; all share one hash tag, so one call covers them in a
-- Cluster too. An identity's entry:
--   spare         the units above every region's floor that can be leased
--   g:<r> e:<r>   region r's grant and when the ledger frees it: grant time
--                 + term (r stops spending it a term after it *sent* the
--                 request, which is earlier)
--   h:<r>         what r was granted before and may still be spending, or
--                 let go and is resting: "units:until;units:until;..."
--                 (at most MAX_HOLDS; past that they merge into one)
--   d:<r>:<i>     instance i of region r: its demand, "units:ms said"
-- The epoch (KEYS[1]) holds when the ledger was made (ms, Redis TIME). It
-- outlives every entry (its TTL is raised to each entry's), so an entry
-- missing from a ledger whose epoch is older than a term and a rest had no
-- grant in use: a new identity is granted at once.
--
-- Safety rules, each per identity:
-- 1. A grant never exceeds the spare minus what every other region holds
--    (live grants, and holds). Floors are outside the spare: never leased.
-- 2. Units a region lets go (a smaller renewal, or a lease left to expire)
--    stay its own for `rest` ms after the ledger frees them: the policy's
--    time to forget a use (a bucket's refill, a window), so a share moved
--    between regions is never spent twice within the policy's own bound.
--    A region may take its own held units back at once.
-- 3. A ledger that is not there (first use, lost, restarted empty: its
--    epoch gone) grants nothing for a term plus a rest: whatever a lost
--    ledger had granted is out of use by then.
--
-- Rebalancing: each region's target is the spare in proportion to the
-- identity's demand in the regions (the sum of what their instances said
-- within the last term); a region gets its target or what others leave,
-- whichever is less.
--
-- KEYS[1]    the epoch; KEYS[2..] one entry per identity asked for
-- ARGV       region, instance, spare, term_ms, rest_ms, max instances a
--            region (demand beyond them is not recorded), then one demand
--            (units in the last period) per identity, in KEYS' order
-- Returns    {now, then per identity: grant, target, why, unleased}: why 0
--            granted in full, 1 less than the target because others hold
--            the rest, 2 a new ledger waiting out a term and a rest;
--            unleased: the spare nobody holds after this grant.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local region, instance = ARGV[1], ARGV[2]
local asked_spare = tonumber(ARGV[3])
local term = tonumber(ARGV[4])
local rest = tonumber(ARGV[5])
local max_instances = tonumber(ARGV[6])
local MAX_HOLDS = 16
local ttl = 4 * (term + rest)

local born = tonumber(redis.call('GET', KEYS[1]))
if not born then
  born = now
  redis.call('SET', KEYS[1], born)
end
-- The epoch outlives every entry it vouches for.
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
local waiting = now < born + term + rest

-- What region q may be spending, or what rests after it, right now.
local function held(q)
  local n = 0
  if now < q.e + rest then
    n = q.g
  end
  for _, h in ipairs(q.holds) do
    if h[1] > n then
      n = h[1]
    end
  end
  return n
end

-- Keeps the holds no other covers (no larger and no longer), at most
-- MAX_HOLDS: past that one hold of the most units until the latest end
-- (holds more, never less).
local function pruned(holds)
  local kept = {}
  for i, h in ipairs(holds) do
    local covered = false
    for j, other in ipairs(holds) do
      if j ~= i and other[1] >= h[1] and other[2] >= h[2] and (other[1] > h[1] or other[2] > h[2] or j < i) then
        covered = true
        break
      end
    end
    if not covered then
      kept[#kept + 1] = h
    end
  end
  if #kept > MAX_HOLDS then
    local units, till = 0, 0
    for _, h in ipairs(kept) do
      if h[1] > units then
        units = h[1]
      end
      if h[2] > till then
        till = h[2]
      end
    end
    kept = { { units, till } }
  end
  return kept
end

-- One identity's renewal: its entry at `key`, this instance's `demand`.
local function lease(key, demand)
  local flat = redis.call('HGETALL', key)
  local fields = {}
  for i = 1, #flat, 2 do
    fields[flat[i]] = flat[i + 1]
  end
  -- Regions on two configs (a rollout) lease from the smaller spare.
  local spare = asked_spare
  local known_spare = tonumber(fields.spare)
  if known_spare and known_spare < spare then
    spare = known_spare
  end
  local regions = {}
  local function of(name)
    local r = regions[name]
    if not r then
      r = { g = 0, e = 0, holds = {}, d = 0, instances = 0 }
      regions[name] = r
    end
    return r
  end
  local stale = {}
  local mine_known = false
  for field, value in pairs(fields) do
    local kind, rest_of = string.match(field, '^(%a):(.+)$')
    if kind == 'g' or kind == 'e' then
      of(rest_of)[kind] = tonumber(value) or 0
    elseif kind == 'h' then
      local holds = of(rest_of).holds
      for units, till in string.gmatch(value, '(%d+):(%d+)') do
        if now < tonumber(till) then
          holds[#holds + 1] = { tonumber(units), tonumber(till) }
        end
      end
    elseif kind == 'd' then
      local r, i = string.match(rest_of, '^([^:]+):(.+)$')
      local units, at = string.match(value, '^(%d+):(%d+)$')
      if not r or not units or tonumber(at) + term <= now then
        stale[#stale + 1] = field
      elseif r == region and i == instance then
        mine_known = true
      else
        local q = of(r)
        q.d = q.d + tonumber(units)
        q.instances = q.instances + 1
      end
    end
  end
  if #stale > 0 then
    redis.call('HDEL', key, unpack(stale))
  end
  local me = of(region)
  if mine_known or me.instances < max_instances then
    redis.call('HSET', key, 'd:' .. region .. ':' .. instance, string.format('%d:%d', demand, now))
    me.d = me.d + demand
  end
  local others, total = 0, 0
  for name, q in pairs(regions) do
    total = total + q.d
    if name ~= region then
      others = others + held(q)
    end
  end
  local target = 0
  if total > 0 then
    -- floor(spare * me.d / total), exact while spare * me.d < 2^53 (the
    -- caller keeps spare and demands far below).
    target = math.floor(spare * me.d / total)
  end
  local grant, why = target, 0
  if waiting then
    grant, why = 0, 2
  else
    local free = spare - others
    if free < 0 then
      free = 0
    end
    if grant > free then
      grant, why = free, 1
    end
  end
  -- The grant this replaces may still be spent until its end, then rests.
  local holds = me.holds
  if me.g > 0 and now < me.e + rest then
    holds[#holds + 1] = { me.g, me.e + rest }
  end
  local kept = pruned(holds)
  if #kept > 0 then
    local text = {}
    for i, h in ipairs(kept) do
      text[i] = string.format('%d:%d', h[1], h[2])
    end
    redis.call('HSET', key, 'h:' .. region, table.concat(text, ';'))
  else
    redis.call('HDEL', key, 'h:' .. region)
  end
  redis.call('HSET', key, 'spare', asked_spare, 'g:' .. region, grant, 'e:' .. region, string.format('%d', now + term))
  -- Outlives every grant and hold it records; an entry that expires had
  -- nothing in use, and the epoch outlives it.
  redis.call('PEXPIRE', key, ttl)
  local unleased = spare - others - grant
  if unleased < 0 then
    unleased = 0
  end
  return grant, target, why, unleased
end

local out = { now }
for k = 2, #KEYS do
  local grant, target, why, unleased = lease(KEYS[k], tonumber(ARGV[5 + k]))
  out[#out + 1] = grant
  out[#out + 1] = target
  out[#out + 1] = why
  out[#out + 1] = unleased
end
return out
