-- Heartbeats of BENCH_CLUSTERS clusters × BENCH_SILOS silos in turn (cluster c-<n>, silo
-- 10.0.<silo>.1:11111@1), with changing load figures. The wrk threads walk the ring from opposite
-- ends, so one silo's heartbeats rarely overlap, starting where BENCH_OFFSET says (so that runs
-- in a row go on around the ring).
local clusters = tonumber(os.getenv("BENCH_CLUSTERS") or "1000")
local silos = tonumber(os.getenv("BENCH_SILOS") or "20")
local total = clusters * silos
local next_thread = 0
local counter = 0

function setup(thread)
  thread:set("thread_id", next_thread)
  next_thread = next_thread + 1
end

function init(args)
  counter = tonumber(os.getenv("BENCH_OFFSET") or "0")
end

request = function()
  counter = counter + 1
  local n = (counter + thread_id * math.floor(total / 2)) % total
  local cluster, silo = n % clusters, math.floor(n / clusters)
  local body = string.format(
    '{"silo":"10.0.%d.1:11111@1","cpu_usage":%d,"memory_usage_bytes":%d,"max_available_memory_bytes":16000000000,"activation_count":%d}',
    silo, counter % 100, 4000000000 + counter % 1000, 1000 + counter % 500)
  return wrk.format("POST", "/v1/clusters/c-" .. cluster .. "/heartbeats",
    { ["Content-Type"] = "application/json" }, body)
end
