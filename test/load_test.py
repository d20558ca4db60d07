#!/usr/bin/python3
"""Load: wrk (Debian) drives `objectcache serve` with 256 concurrent connections for a bounded
time, mixing GETs of 64 KiB objects, PUTs of 64 KiB objects, layerwise retrievals (2 chunks x 4
layers of Llama-3.1-8B) and bad requests (a range past the end: 416; a malformed layerwise
descriptor: 400).

Checks: no socket errors, every answer is the one its request must get (valid requests 200 or
206 only, bad ones 400 or 416 only, never 5xx), every GET body and every layerwise stream is
byte-identical to the reference fetched before the load, the server is alive at the end and
its RSS is reported at start and end, with p50/p99 latency and the request rate.

  load_test.py --objectcache PATH [--seconds 60] [--connections 256]
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import argument_parser  # noqa: E402

THREADS = 2

LUA = r"""
-- Each thread picks a request kind by a fixed rotation; the response checks use the files
-- written by load_test.py (the reference bodies).
local function slurp(path)
  local f = assert(io.open(path, "rb")); local s = f:read("*a"); f:close(); return s
end
local get_body = slurp("@DIR@/get.bin")
local layerwise_ref = slurp("@DIR@/layerwise.bin")
local layerwise_req = slurp("@DIR@/layerwise.json")
local put_body = slurp("@DIR@/put.bin")
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  n = 0
  sent = {get = 0, put = 0, layerwise = 0, bad = 0}
  got = {}
  wrong_body = 0
end

local kinds = {"get", "get", "get", "put", "layerwise", "get", "put", "bad"}

function request()
  n = n + 1
  local kind = kinds[(n % #kinds) + 1]
  sent[kind] = sent[kind] + 1
  if kind == "get" then
    return wrk.format("GET", "/load/get-" .. (n % 64))
  elseif kind == "put" then
    return wrk.format("PUT", "/load/put-" .. (n % 512), nil, put_body)
  elseif kind == "layerwise" then
    return wrk.format("POST", "/load-kv?layerwise", {["Content-Type"] = "application/json"},
                      layerwise_req)
  elseif sent.bad % 2 == 0 then
    return wrk.format("GET", "/load/get-1", {["Range"] = "bytes=70000-80000"})
  else
    return wrk.format("POST", "/load-kv?layerwise", nil, "{\"version\": 1, \"keys\": [")
  end
end

function response(status, headers, body)
  got[status] = (got[status] or 0) + 1
  if status == 200 then
    if #body == #get_body then
      if body ~= get_body then wrong_body = wrong_body + 1 end
    elseif #body > 0 and body ~= layerwise_ref then
      wrong_body = wrong_body + 1
    end
  end
end

function done(summary, latency, requests)
  local total = {get = 0, put = 0, layerwise = 0, bad = 0}
  local statuses = {}
  local wrong = 0
  for _, t in ipairs(threads) do
    local s = t:get("sent")
    for k, v in pairs(s) do total[k] = total[k] + v end
    for k, v in pairs(t:get("got")) do statuses[tostring(k)] = (statuses[tostring(k)] or 0) + v end
    wrong = wrong + t:get("wrong_body")
  end
  local parts = {}
  for k, v in pairs(statuses) do table.insert(parts, string.format("\"%s\": %d", k, v)) end
  io.write(string.format(
    "RESULT {\"requests\": %d, \"seconds\": %.3f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, " ..
    "\"max_ms\": %.3f, \"errors\": {\"connect\": %d, \"read\": %d, \"write\": %d, " ..
    "\"status\": %d, \"timeout\": %d}, \"sent\": {\"get\": %d, \"put\": %d, " ..
    "\"layerwise\": %d, \"bad\": %d}, \"statuses\": {%s}, \"wrong_body\": %d}\n",
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1e3,
    latency:percentile(99) / 1e3, latency.max / 1e3, summary.errors.connect,
    summary.errors.read, summary.errors.write, summary.errors.status, summary.errors.timeout,
    total.get, total.put, total.layerwise, total.bad, table.concat(parts, ", "), wrong))
end
"""


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def http(method, url, body=None, headers=None):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, r.read()


def main():
    p = argument_parser()
    p.add_argument("--seconds", type=int, default=60)
    p.add_argument("--connections", type=int, default=256)
    args = p.parse_args()
    oc = args.objectcache
    with tempfile.TemporaryDirectory() as d:
        port_file = os.path.join(d, "port")
        log = open(os.path.join(d, "serve.log"), "wb")
        srv = subprocess.Popen([oc, "serve", "--anonymous", "--listen", "127.0.0.1:0", "--store",
                                os.path.join(d, "store"), "--port-file", port_file,
                                "--log-level", "warn", "--max-connections", "1024"],
                               stdout=log, stderr=log)
        try:
            for _ in range(400):
                if os.path.exists(port_file) and os.path.getsize(port_file):
                    break
                time.sleep(0.025)
            base = f"http://127.0.0.1:{int(open(port_file).read())}"
            get_body = os.urandom(65536)
            put_body = os.urandom(65536)
            http("PUT", base + "/load")
            for i in range(64):
                http("PUT", f"{base}/load/get-{i}", get_body)
            http("PUT", base + "/load-kv", headers={"x-objectcache-kv-layout": "llama-3.1-8b"})
            keys = subprocess.run([oc, "kv", "keys", "--layout", "llama-3.1-8b"] +
                                  [str(i) for i in range(32)], check=True,
                                  capture_output=True).stdout.decode().split()
            store = "file://" + os.path.join(d, "chunks")
            for i, k in enumerate(keys):
                raw = os.path.join(d, f"raw{i}")
                with open(raw, "wb") as f:
                    f.write(os.urandom(32 * 65536))
                subprocess.run([oc, "kv", "put-chunk", "--store", store, "--layout",
                                "llama-3.1-8b", "--key", k, raw], check=True)
                obj = subprocess.run([oc, "kv", "get", "--store", store, k], check=True,
                                     capture_output=True).stdout
                http("PUT", f"{base}/load-kv/{k}", obj)
            layerwise = json.dumps({"version": 1, "keys": keys, "layers": [0, 4]}).encode()
            status, ref = http("POST", base + "/load-kv?layerwise", layerwise)
            assert status == 200 and len(ref) > 2 * 4 * 65536, (status, len(ref))
            for name, data in [("get.bin", get_body), ("put.bin", put_body),
                               ("layerwise.bin", ref), ("layerwise.json", layerwise)]:
                with open(os.path.join(d, name), "wb") as f:
                    f.write(data)
            script = os.path.join(d, "load.lua")
            with open(script, "w") as f:
                f.write(LUA.replace("@DIR@", d))
            rss_start = rss_kib(srv.pid)
            run = subprocess.run(["wrk", f"-t{THREADS}", f"-c{args.connections}", f"-d{args.seconds}s",
                                  "--timeout", "20s", "-s", script, base],
                                 capture_output=True, text=True, timeout=args.seconds + 120)
            print(run.stdout)
            assert run.returncode == 0, run.stderr
            result = json.loads(re.search(r"^RESULT (.*)$", run.stdout, re.M).group(1))
            assert srv.poll() is None, "the server died"
            time.sleep(1)
            rss_end = rss_kib(srv.pid)
            # Still serving, and what it stored under load is whole.
            assert http("GET", f"{base}/load/put-3")[1] == put_body
            assert http("GET", f"{base}/load/get-3")[1] == get_body
        finally:
            srv.send_signal(signal.SIGTERM)
            rc = srv.wait(60)
        assert rc == 0, f"server exit status {rc}"
    errors = result["errors"]
    statuses = result["statuses"]
    print(f"{args.connections} connections, {result['seconds']:.0f} s: {result['requests']} "
          f"requests ({result['requests'] / result['seconds']:.0f}/s), p50 "
          f"{result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, max "
          f"{result['max_ms']:.1f} ms; statuses {statuses}; server RSS {rss_start / 1024:.0f} MiB "
          f"at start, {rss_end / 1024:.0f} MiB at end")
    assert errors["connect"] == 0 and errors["read"] == 0 and errors["write"] == 0, errors
    assert errors["timeout"] == 0, errors
    assert set(statuses) <= {"200", "206", "400", "416"}, statuses
    valid = statuses.get("200", 0) + statuses.get("206", 0)
    bad = statuses.get("400", 0) + statuses.get("416", 0)
    sent = result["sent"]
    assert bad <= sent["bad"] and valid <= sent["get"] + sent["put"] + sent["layerwise"], result
    # Requests still in flight when wrk stops are neither answered nor errors: at most one a
    # connection, plus one request() call per thread that wrk makes before it connects.
    assert sum(sent.values()) - (valid + bad) <= args.connections + THREADS, result
    assert result["wrong_body"] == 0, result
    assert sent["layerwise"] > 0 and sent["bad"] > 0 and sent["put"] > 0
    print("ok")


if __name__ == "__main__":
    main()
