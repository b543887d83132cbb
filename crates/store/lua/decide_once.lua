-- Decides all keys all-or-nothing under a request id (a retry is charged
-- once: crate::request_id). KEYS: the states, then the id record of the
-- first key (a hash in the same slot: id -> "<until_ms>:<costs>"). ARGV:
-- as decide_all.lua, then after the fields the id, the call's costs
-- ("3", or "1,2,1" for a batch), the retry window in ms and the most ids
-- the record keeps.
-- A live record with the same costs: every key is peeked (cost 0), nothing
-- consumed, and the call answers admitted. With other costs: the error
--   TOLLGATEIDCOST <recorded costs>
-- and nothing is written. Otherwise the keys are decided, and when a
-- consuming call admits, the id is recorded, oldest ids (by expiry)
-- dropped beyond the most. Returns decide_all.lua's integers, then 1 when
-- replayed, else 0.
NKEYS = #KEYS - 1
local record = KEYS[#KEYS]
local at = 4 + NKEYS * FIELDS
local id, costs = ARGV[at], ARGV[at + 1]
local window, max_ids = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
local now = read_now()

local known = redis.call('HGET', record, id)
if known then
  local colon = string.find(known, ':', 1, true)
  local until_ms = tonumber(string.sub(known, 1, colon - 1))
  if until_ms > now then
    local was = string.sub(known, colon + 1)
    if was ~= costs then
      return redis.error_reply('TOLLGATEIDCOST ' .. was)
    end
    local out, stop = all_or_nothing(now, ARGV[3], true)
    if not out then
      return stop
    end
    for i = 1, NKEYS do
      out[(i - 1) * 4 + 1] = 1
      out[(i - 1) * 4 + 3] = 0
    end
    out[#out + 1] = 1
    return out
  end
end

local out, admitted = all_or_nothing(now, ARGV[3], false)
if not out then
  return admitted
end
if admitted then
  if redis.call('HLEN', record) >= max_ids then
    -- Full: forget what expired, then the oldest until there is room.
    local all = redis.call('HGETALL', record)
    local live = {}
    for i = 1, #all, 2 do
      local until_ms = tonumber(string.match(all[i + 1], '^(%d+):'))
      if until_ms <= now then
        redis.call('HDEL', record, all[i])
      else
        live[#live + 1] = { until_ms, all[i] }
      end
    end
    if #live >= max_ids then
      table.sort(live, function(a, b) return a[1] < b[1] end)
      for i = 1, #live - max_ids + 1 do
        redis.call('HDEL', record, live[i][2])
      end
    end
  end
  redis.call('HSET', record, id, int(now + window) .. ':' .. costs)
  redis.call('PEXPIRE', record, int(window))
end
out[#out + 1] = 0
return out
