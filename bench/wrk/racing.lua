-- Placements of new grains, each asked for by four callers at once: two consecutive requests of a
-- wrk thread name the same grain (they leave on two connections together), and both threads walk
-- the same names, so the two pairs race too.
local cluster = os.getenv("BENCH_CLUSTER") or "bench"
local run = os.getenv("BENCH_RUN") or "0"
local counter = 0

request = function()
  counter = counter + 1
  local body = string.format('{"grain":"race/%s-%d"}', run, math.floor(counter / 2))
  return wrk.format("POST", "/v1/clusters/" .. cluster .. "/placements",
    { ["Content-Type"] = "application/json" }, body)
end
