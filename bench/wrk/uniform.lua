-- Placements of known grains drawn uniformly from the BENCH_BIG_ROWS rows bench/run.sh adds to the
-- directory: nearly every request names a grain no recent request named (no cache helps).
local cluster = os.getenv("BENCH_CLUSTER") or "bench"
local rows = tonumber(os.getenv("BENCH_BIG_ROWS") or "10000000")

local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
end

function init(args)
  math.randomseed(os.time() * 16 + id)
end

request = function()
  local grain = math.random(0, rows - 1)
  return wrk.format("POST", "/v1/clusters/" .. cluster .. "/placements",
    { ["Content-Type"] = "application/json" }, '{"grain":"big/g' .. grain .. '"}')
end
