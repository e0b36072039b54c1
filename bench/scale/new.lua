-- Placements of grains never seen before: every request places and registers a new activation.
-- Same as bench/wrk/new.lua, with the cluster and run id from SCALE_CLUSTER and SCALE_RUN. The
-- grains are "fresh/…", so bench/scale.sh can delete them afterwards and keep the directory at
-- its nominal size.
local cluster = os.getenv("SCALE_CLUSTER")
local run = os.getenv("SCALE_RUN") or "0"
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
    { ["Content-Type"] = "application/json" }, body)
end
