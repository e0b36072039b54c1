-- Placements of grains that already have an activation (directory hits), chosen uniformly at random
-- among user/g0 … user/g{SCALE_GRAINS-1}, so the whole directory is read, not a hot corner of it
-- (bench/wrk/existing.lua strides through it; both threads there ask for the same grains).
local cluster = os.getenv("SCALE_CLUSTER")
local grains = tonumber(os.getenv("SCALE_GRAINS"))
local next_thread = 0

function setup(thread)
  thread:set("thread_id", next_thread)
  next_thread = next_thread + 1
end

function init(args)
  -- A different random sequence per thread (thread_id is set by setup before init runs).
  math.randomseed(os.time() + 7919 * (thread_id or 0))
end

request = function()
  local grain = math.random(0, grains - 1)
  return wrk.format("POST", "/v1/clusters/" .. cluster .. "/placements",
    { ["Content-Type"] = "application/json" }, '{"grain":"user/g' .. grain .. '"}')
end
