-- Placements of grains that already have an activation (directory hits).
local cluster = os.getenv("BENCH_CLUSTER") or "bench"
local grains = tonumber(os.getenv("BENCH_GRAINS") or "20000")
local counter = 0

request = function()
  counter = counter + 1
  local grain = (counter * 7919) % grains
  return wrk.format("POST", "/v1/clusters/" .. cluster .. "/placements",
    { ["Content-Type"] = "application/json" }, '{"grain":"user/g' .. grain .. '"}')
end
