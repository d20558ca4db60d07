#!/usr/bin/python3
"""`objectcache bench path` end to end on a small prefix: it exits 0 (every retrieved byte is
checked), and the JSON has the promised metrics (the raw streams from cache and from the chunk
files among them) and a row per case (v1; v2 by sendfile; v2 copied). The numbers are not
asserted (they are measurements)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import objectcache_binary  # noqa: E402

METRICS = ["raw_stream_gbps", "agg_gbps", "ratio_vs_raw", "server_cpu_s_per_gib",
           "client_cpu_s_per_gib", "agg_gbps_v1", "ratio_vs_raw_v1", "server_cpu_s_per_gib_v1",
           "client_cpu_s_per_gib_v1", "agg_gbps_copied", "server_cpu_s_per_gib_copied",
           "server_cpu_v2_vs_v1", "lookup_ms_1", "lookup_ms_64",
           "lookup_ms_1024", "lookup_ms_8192", "raw_sender_cpu_s_per_gib",
           "raw_receiver_cpu_s_per_gib", "agg_gbps_c1", "agg_gbps_c3", "first_layer_ms_64",
           "first_layer_ms_1024", "raw_files_gbps", "raw_files_sender_cpu_s_per_gib",
           "raw_files_receiver_cpu_s_per_gib", "ratio_vs_raw_files", "ratio_vs_raw_files_v1",
           "ratio_vs_raw_files_copied"]


def main():
    binary = objectcache_binary()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "path.json")
        # Concurrency and first layers small here; a first layer of 1024 tokens (64 chunks)
        # names the 8 stored chunks over and over. The regions start 16 bytes past a page
        # boundary, so every byte is checked where it landed at that placement too.
        run = subprocess.run([binary, "bench", "path", "--chunks", "8", "--rounds", "1",
                              "--concurrency", "1", "3", "--concurrency-chunks", "4",
                              "--first-layer-tokens", "64", "1024", "--region-offset", "16",
                              "--json", out, "--dir", os.path.join(tmp, "scratch")],
                             capture_output=True, text=True, timeout=300)
        print(run.stdout)
        assert run.returncode == 0, run.stderr
        report = json.load(open(out))
        for m in METRICS:
            assert m in report["metrics"], m
        assert report["params"]["region_offset"].startswith("16 bytes"), report["params"]
        assert report["metrics"]["raw_stream_gbps"] > 0
        assert report["metrics"]["raw_files_gbps"] > 0
        versions = [r for r in report["rows"] if "wire_version" in r]
        assert [r["case"] for r in versions] == ["v1", "v2", "v2 copied"], report["rows"]
        assert all(r["agg_gbps"] > 0 for r in versions), report["rows"]
        lookups = [r["lookup_keys"] for r in report["rows"] if "lookup_keys" in r]
        assert lookups == [1, 64, 1024, 8192], report["rows"]
        for args, flag in [(["--chunks", "0"], "--chunks"), (["--concurrency", "0"], "--concurrency"),
                           (["--first-layer-tokens", "0"], "--first-layer-tokens"),
                           (["--region-offset", "4096"], "--region-offset")]:
            bad = subprocess.run([binary, "bench", "path", *args, "--dir",
                                  os.path.join(tmp, "bad")], capture_output=True, text=True)
            assert bad.returncode != 0 and flag in bad.stderr, bad.stderr
    print("ok")


if __name__ == "__main__":
    main()
