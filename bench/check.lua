-- wrk script: POST /v1/check for one policy over KEYS keys (1 = one hot key).
local keys = tonumber(os.getenv("KEYS") or "100000")
local policy = os.getenv("POLICY") or "bench"
local headers = { ["Content-Type"] = "application/json" }
local bodies = {}
local n = 0
init = function(args)
  -- Pre-build a pool of bodies so wrk's Lua does not dominate the measurement.
  local pool = math.min(keys, 100000)
  for i = 1, pool do
    bodies[i] = '{"policy":"' .. policy .. '","key":"tenant-' .. ((i * 7919) % keys) .. '"}'
  end
  n = pool
end
local i = 0
request = function()
  i = i % n + 1
  return wrk.format("POST", "/v1/check", headers, bodies[i])
end
