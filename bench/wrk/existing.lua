-- Placements of grains that already have an activation (directory hits).
local cluster = os.getenv("BENCH_CLUSTER") or "bench"
-- With BENCH_KEY set, every request carries it (bench/auth.sh measures what credentials cost).
local headers = { ["Content-Type"] = "application/json" }
if os.getenv("BENCH_KEY") then headers["Authorization"] = "Bearer " .. os.getenv("BENCH_KEY") end
local grains = tonumber(os.getenv("BENCH_GRAINS") or "20000")
local counter = 0

request = function()
  counter = counter + 1
  local grain = (counter * 7919) % grains
  return wrk.format("POST", "/v1/clusters/" .. cluster .. "/placements",
    headers, '{"grain":"user/g' .. grain .. '"}')
end
