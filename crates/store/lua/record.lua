-- Request ids (crate::request_id): a record is a hash in the slot of the
-- state it was recorded with, id -> "<expires_ms>:<request>", its TTL the
-- policy's retry window. <request> is the hex digest of the whole request
-- (crate::request_id::RequestDigest); an older version's joined costs
-- ("1,1") never equal one.

-- What `record` knows of `id` at `now`: nil (unknown or expired), true
-- (recorded for this `request`), or false (recorded for another request).
local function recall(record, id, request, now)
  local known = redis.call('HGET', record, id)
  if not known then
    return nil
  end
  local colon = string.find(known, ':', 1, true)
  if tonumber(string.sub(known, 1, colon - 1)) <= now then
    return nil
  end
  return string.sub(known, colon + 1) == request
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
