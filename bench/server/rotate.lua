-- wrk script: rotate through pre-built AdmissionReview requests, and report the run as one JSON line.
--
-- Usage: wrk -t1 -c16 -d10s -s bench/server/rotate.lua https://127.0.0.1:PORT -- MANIFEST
-- MANIFEST lists "PATH FILE" per line (bench/server/reviews.py writes it); each FILE is a JSON body.
-- Requests are formatted once in init(), so the per-request Lua cost is a table lookup. There is no
-- response() callback on purpose: defining one makes wrk parse every response into Lua and slows the
-- load generator, which shares the 2 cores with the server under test. wrk itself counts non-2xx
-- answers (summary.errors.status), which done() reports.

local requests = {}
local n = 0
local i = 0

function init(args)
  local manifest = args[1]
  for line in io.lines(manifest) do
    local path, file = line:match("^(%S+)%s+(%S+)$")
    if path then
      local f = assert(io.open(file, "rb"))
      local body = f:read("*a")
      f:close()
      local headers = {}
      headers["Content-Type"] = "application/json"
      headers["Accept"] = "application/json, */*"
      n = n + 1
      requests[n] = wrk.format("POST", path, headers, body)
    end
  end
  assert(n > 0, "no requests in " .. manifest)
end

function request()
  i = i % n + 1
  return requests[i]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "bytes": %d, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, ' ..
    '"latency_us": {"p50": %d, "p90": %d, "p99": %d, "max": %d, "mean": %.1f}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))
end
