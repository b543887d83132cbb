-- wrk script: GET /items over KEYS tenants (X-Tenant), for bench/layer.sh.
local keys = tonumber(os.getenv("KEYS") or "1")
local reqs = {}
local n = 0
init = function(args)
  local pool = math.min(keys, 100000)
  for i = 1, pool do
    reqs[i] = wrk.format("GET", "/items", {
      ["X-Tenant"] = "tenant-" .. ((i * 7919) % keys),
    })
  end
  n = pool
end
local i = 0
request = function()
  i = i % n + 1
  return reqs[i]
end
