-- wrk script of the hot-key bench: thread i sends to port i of HOT_PORTS
-- (one edge isolate each), every request from the one client HOT_IP, and a
-- JSON summary line (with statuses counted) is printed at the end.
--
-- HOT_RATE > 0 paces the load: each thread sends HOT_RATE / threads
-- requests a second on a fixed schedule, over its connections, whether or
-- not earlier answers have come (as far as its connections allow: a
-- connection waits for its answer). An offered rate, not a closed loop: when
-- the server slows, requests pile up in it instead of being sent later.
local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } hot_timespec;
int clock_gettime(int clock, hot_timespec *tp);
]]
local ts = ffi.new("hot_timespec")
local function nowMs()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end

local ports = {}
for port in string.gmatch(os.getenv("HOT_PORTS") or "", "[^,]+") do table.insert(ports, port) end
local ip = os.getenv("HOT_IP") or "10.40.0.1"
local rate = tonumber(os.getenv("HOT_RATE") or "0")
local threads = {}
local made = 0

function setup(thread)
  made = made + 1
  thread.addr = wrk.lookup("127.0.0.1", ports[((made - 1) % #ports) + 1])[1]
  thread:set("threadCount", #ports)
  table.insert(threads, thread)
end

function init(args)
  ok, refused, failed, other = 0, 0, 0, 0
  local headers = {}
  for k, v in pairs(wrk.headers) do headers[k] = v end
  headers["CF-Connecting-IP"] = ip
  req = wrk.format(nil, wrk.path, headers)
  if rate > 0 then
    interval = 1000 * threadCount / rate
    nextAt = nil
  end
end

function request() return req end

if rate > 0 then
  -- Called before each request: the wait until its slot on the thread's schedule, if that is still ahead.
  function delay()
    local now = nowMs()
    if nextAt == nil then nextAt = now end
    local wait = nextAt - now
    nextAt = nextAt + interval
    if wait > 0 then return wait end
    return 0
  end
end

function response(status, headers, body)
  if status == 200 then ok = ok + 1
  elseif status == 429 then refused = refused + 1
  elseif status >= 500 then failed = failed + 1
  else other = other + 1 end
end

function done(summary, latency, requests)
  local o, r, f, x = 0, 0, 0, 0
  for _, t in ipairs(threads) do
    o = o + t:get("ok"); r = r + t:get("refused"); f = f + t:get("failed"); x = x + t:get("other")
  end
  io.write(string.format(
    'HOTKEY {"requests":%d,"durationUs":%d,"p50Us":%d,"p99Us":%d,"maxUs":%d,"ok":%d,"refused":%d,"failed":%d,"other":%d,"socketErrors":%d,"timeouts":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max, o, r, f, x,
    summary.errors.connect + summary.errors.read + summary.errors.write, summary.errors.timeout))
end
