-- Decides all keys all-or-nothing under one request id (a retry is charged
-- once: crate::request_id). KEYS: the states, then the id record of the
-- first key (record.lua). ARGV: as decide_all.lua, then after the fields
-- the id, the whole request's digest (record.lua), the retry window in ms
-- and the most ids the record keeps.
-- A live record of the same request: every key is peeked (cost 0), nothing
-- consumed, and the call answers admitted. Of another request: the error
--   TOLLGATEIDOTHER
-- and nothing is written. Otherwise the keys are decided, and when a
-- consuming call admits, the id is recorded. Returns decide_all.lua's
-- integers, then 1 when replayed, else 0.
NKEYS = #KEYS - 1
local record = KEYS[#KEYS]
local at = 4 + NKEYS * FIELDS
local id, request = ARGV[at], ARGV[at + 1]
local window, max_ids = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
local now = read_now()

local known = recall(record, id, request, now)
if known == true then
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
elseif known == false then
  return redis.error_reply('TOLLGATEIDOTHER a request id was recorded for another request')
end

local out, admitted = all_or_nothing(now, ARGV[3], false)
if not out then
  return admitted
end
if admitted then
  remember(record, id, request, now, window, max_ids)
end
out[#out + 1] = 0
return out
