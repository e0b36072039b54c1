-- Heartbeats from BENCH_HEARTBEAT_SILOS silos in turn, with changing load figures, in a cluster of
-- their own. The wrk threads walk the silos from opposite ends of the ring, so with 64 connections
-- and 1000 silos one silo's heartbeats rarely overlap, as in life (a silo beats about once a
-- second).
local cluster = os.getenv("BENCH_HEARTBEAT_CLUSTER") or "heartbeats"
local silos = tonumber(os.getenv("BENCH_HEARTBEAT_SILOS") or "1000")
local next_thread = 0
local counter = 0

function setup(thread)
  thread:set("thread_id", next_thread)
  next_thread = next_thread + 1
end

request = function()
  counter = counter + 1
  local silo = (counter + thread_id * math.floor(silos / 2)) % silos
  local body = string.format(
    '{"silo":"10.0.%d.%d:11111@1","cpu_usage":%d,"memory_usage_bytes":%d,"max_available_memory_bytes":16000000000,"activation_count":%d,"recent_activation_count":%d}',
    math.floor(silo / 250), silo % 250, counter % 100, 4000000000 + counter % 1000, 1000 + counter % 500, counter % 300)
  return wrk.format("POST", "/v1/clusters/" .. cluster .. "/heartbeats",
    { ["Content-Type"] = "application/json" }, body)
end
