-- wrk script for `bench layers`: POST a JSON user, then write wrk's summary as JSON.
--
-- Environment:
--   BENCH_WRK_BODY  the request body (default: the layers experiment's user)
--   BENCH_WRK_JSON  where done() writes the summary; nothing is written when it is unset
--
-- The summary file holds one JSON object:
--   {"requests": n, "duration_us": n, "bytes": n,
--    "errors": {"connect": n, "read": n, "write": n, "status": n, "timeout": n},
--    "latency_us": {"min": n, "mean": x, "max": n, "stdev": x,
--                   "p50": n, "p90": n, "p99": n, "p99.9": n}}
-- Latencies are microseconds, as wrk keeps them; "status" counts responses with a status
-- of 400 or more. A value wrk cannot give (no request completed) is null.

wrk.method = "POST"
wrk.body = os.getenv("BENCH_WRK_BODY") or '{"id": 1, "name": "user", "email": "user@email.com"}'
wrk.headers["Content-Type"] = "application/json"

local function number(x)
  if x == nil or x ~= x or x == math.huge or x == -math.huge then
    return "null"
  end
  if x == math.floor(x) then
    return string.format("%d", x)
  end
  return string.format("%.3f", x)
end

function done(summary, latency, requests)
  local path = os.getenv("BENCH_WRK_JSON")
  if path == nil or path == "" then
    return
  end
  local errors = summary.errors
  local percentiles = {}
  for _, p in ipairs({ { "p50", 50 }, { "p90", 90 }, { "p99", 99 }, { "p99.9", 99.9 } }) do
    local value = nil
    if summary.requests > 0 then
      value = latency:percentile(p[2])
    end
    percentiles[#percentiles + 1] = string.format('"%s": %s', p[1], number(value))
  end
  local empty = summary.requests == 0
  local out = string.format(
    '{"requests": %s, "duration_us": %s, "bytes": %s, ' ..
    '"errors": {"connect": %s, "read": %s, "write": %s, "status": %s, "timeout": %s}, ' ..
    '"latency_us": {"min": %s, "mean": %s, "max": %s, "stdev": %s, %s}}\n',
    number(summary.requests), number(summary.duration), number(summary.bytes),
    number(errors.connect), number(errors.read), number(errors.write),
    number(errors.status), number(errors.timeout),
    number(not empty and latency.min or nil), number(not empty and latency.mean or nil),
    number(not empty and latency.max or nil), number(not empty and latency.stdev or nil),
    table.concat(percentiles, ", "))
  local file = assert(io.open(path, "w"))
  file:write(out)
  file:close()
end
