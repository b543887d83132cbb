-- Request ids (crate::request_id): a record is a hash in the slot of the
-- state it was recorded with, id -> "<expires_ms>:<request>:<replays>",
-- its TTL the policy's retry window. <request> is the hex digest of the
-- whole request (crate::request_id::RequestDigest); an older version's
-- joined costs ("1,1") never equal one. <replays> counts the times the
-- record answered (absent: none, as an older version wrote it).

-- The most replays one record answers (crate::request_id::MAX_REPLAYS):
-- after them the id is charged as a new request, so a storm of retries
-- under one id buys at most this many free attempts a charge.
local MAX_REPLAYS = 3

-- What `record` knows of `id` at `now`: nil (unknown, expired, or its
-- replays used up), true (recorded for this `request`: a replay, counted
-- here), or false (recorded for another request).
local function recall(record, id, request, now)
  local known = redis.call('HGET', record, id)
  if not known then
    return nil
  end
  local until_ms, digest, replays = string.match(known, '^(%d+):([^:]*):?(%d*)$')
  if not until_ms or tonumber(until_ms) <= now then
    return nil
  end
  if digest ~= request then
    return false
  end
  replays = tonumber(replays) or 0
  if replays >= MAX_REPLAYS then
    return nil
  end
  redis.call('HSET', record, id, until_ms .. ':' .. digest .. ':' .. (replays + 1))
  return true
end

-- Records `id` until now + window; a full record first forgets what
-- expired, then its oldest ids until there is room.
local function remember(record, id, request, now, window, max_ids)
  if redis.call('HLEN', record) >= max_ids then
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
  redis.call('HSET', record, id, int(now + window) .. ':' .. request)
  redis.call('PEXPIRE', record, int(window))
end
