-- Placements of grains never seen before: every request places and registers a new activation.
local cluster = os.getenv("BENCH_CLUSTER") or "bench"
-- With BENCH_KEY set, every request carries it (bench/auth.sh measures what credentials cost).
local headers = { ["Content-Type"] = "application/json" }
if os.getenv("BENCH_KEY") then headers["Authorization"] = "Bearer " .. os.getenv("BENCH_KEY") end
local run = os.getenv("BENCH_RUN") or "0"
local next_thread = 0
local counter = 0

function setup(thread)
  thread:set("thread_id", next_thread)
  next_thread = next_thread + 1
end

request = function()
  counter = counter + 1
  local body = string.format('{"grain":"fresh/%s-%d-%d"}', run, thread_id, counter)
  return wrk.format("POST", "/v1/clusters/" .. cluster .. "/placements",
    headers, body)
end
