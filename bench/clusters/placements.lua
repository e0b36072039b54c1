-- Placements spread over BENCH_CLUSTERS clusters: each request names a random cluster and one of
-- BENCH_GRAINS grains of it (new at first, known once placed), as a runtime's callers would.
local clusters = tonumber(os.getenv("BENCH_CLUSTERS") or "1000")
local grains = tonumber(os.getenv("BENCH_GRAINS") or "200")
local next_thread = 0

function setup(thread)
  thread:set("thread_id", next_thread)
  next_thread = next_thread + 1
end

function init(args)
  math.randomseed(1000 + thread_id)
end

request = function()
  local cluster = math.random(0, clusters - 1)
  local body = string.format('{"grain":"user/g%d"}', math.random(0, grains - 1))
  return wrk.format("POST", "/v1/clusters/c-" .. cluster .. "/placements",
    { ["Content-Type"] = "application/json" }, body)
end
