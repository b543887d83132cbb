-- wrk script: POST /v1/check as check.lua, each request under a new
-- request id (a first attempt, recorded; never a replay), or, with
-- RETRIES=n, each id sent n times in a row (the rest replays).
local keys = tonumber(os.getenv("KEYS") or "100000")
local policy = os.getenv("POLICY") or "bench"
local retries = tonumber(os.getenv("RETRIES") or "1")
local headers = { ["Content-Type"] = "application/json" }
local threads = 0
setup = function(thread)
  threads = threads + 1
  thread:set("tag", threads)
end
local bodies = {}
local n = 0
init = function(args)
  -- The bodies' fixed parts; the id is the only thing built per request.
  local pool = math.min(keys, 100000)
  for i = 1, pool do
    bodies[i] = '{"policy":"' .. policy .. '","key":"tenant-' .. ((i * 7919) % keys) .. '","request_id":"t' .. tag .. '-'
  end
  n = pool
end
local i, sent = 0, 0
request = function()
  if sent % retries == 0 then
    i = i % n + 1
  end
  sent = sent + 1
  local id = math.floor((sent - 1) / retries)
  return wrk.format("POST", "/v1/check", headers, bodies[i] .. id .. '"}')
end
