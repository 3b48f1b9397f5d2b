-- wrk script: each request comes from one of BENCH_KEYS client IPs, and a
-- JSON summary line is printed at the end for tools/bench/run.ts to read.
local keys = tonumber(os.getenv("BENCH_KEYS") or "0")
local fixed = os.getenv("BENCH_IP") or "10.255.0.1"
local counter = 0

request = function()
  local ip = fixed
  if keys > 0 then
    counter = counter + 1
    local i = (counter * 7919 + math.random(0, keys - 1)) % keys
    ip = string.format("10.%d.%d.%d", math.floor(i / 65536) % 256, math.floor(i / 256) % 256, i % 256)
  end
  local headers = {}
  for k, v in pairs(wrk.headers) do headers[k] = v end
  headers["CF-Connecting-IP"] = ip
  return wrk.format(nil, wrk.path, headers)
end

done = function(summary, latency, requests)
  io.write(string.format(
    'BENCH {"requests":%d,"durationUs":%d,"p50Us":%d,"p99Us":%d,"non2xx":%d,"socketErrors":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
