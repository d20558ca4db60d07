#!/usr/bin/python3
"""`objectcache bench ttft --preset smoke` and `objectcache demo` end to end: both exit 0
(each checks every byte it received against what it stored), the JSON, CSV and SVG files
have the rows and fields the TTFT experiment promises, and a run without --dir leaves nothing
behind."""
import csv
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import objectcache_binary  # noqa: E402

MODES = ["Local-DRAM-LW", "S3-CW", "S3-LW", "S3Agg-CW", "S3Agg-LW"]
FIELDS = ["model", "context", "hit", "granularity", "mode", "ttft_ms", "added_ms", "added_pct"]


def main():
    binary = objectcache_binary()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ttft.json")
        run = subprocess.run([binary, "bench", "ttft", "--preset", "smoke", "--json", out,
                              "--dir", os.path.join(tmp, "scratch"), "--no-progress"],
                             capture_output=True, text=True, timeout=300)
        print(run.stdout)
        assert run.returncode == 0, run.stderr
        report = json.load(open(out))
        rows = report["rows"]
        assert [r["mode"] for r in rows] == MODES, rows
        for r in rows:
            for f in FIELDS:
                assert f in r, (f, r)
            assert r["model"] == "llama-3.1-8b" and r["context"] == 4096 and r["hit"] == 0.5
            assert r["granularity"] == 16 and r["ttft_ms"] > 0
        assert rows[0]["added_ms"] == 0
        metrics = report["metrics"]
        for m in ["link_gbps", "dilation", "agglw_added_over_layer_4k", "s3lw_over_agglw_added_4k"]:
            assert m in metrics, m
        assert metrics["dilation"] > 0 and metrics["link_gbps"] > 0
        with open(os.path.join(tmp, "ttft.csv")) as f:
            table = list(csv.DictReader(f))
        assert [r["mode"] for r in table] == MODES
        svg = ET.parse(os.path.join(tmp, "ttft.svg")).getroot()
        bars = [e for e in svg.iter() if e.tag.endswith("rect") and e.find("{*}title") is not None]
        assert len(bars) == len(MODES), len(bars)
        # Bad input: a clear message and a nonzero exit.
        bad = subprocess.run([binary, "bench", "ttft", "--mode", "S3-XX", "--dir",
                              os.path.join(tmp, "bad")], capture_output=True, text=True)
        assert bad.returncode != 0 and "unknown mode" in bad.stderr, bad.stderr

        # Without --dir nothing is left behind: not in the directory it runs from, not in the
        # temporary directory it used.
        cwd, scratch = os.path.join(tmp, "cwd"), os.path.join(tmp, "tmpdir")
        os.mkdir(cwd)
        os.mkdir(scratch)
        demo = subprocess.run([binary, "demo", "--context", "2048"], capture_output=True,
                              text=True, timeout=300, cwd=cwd, env=dict(os.environ, TMPDIR=scratch))
        print(demo.stdout)
        assert demo.returncode == 0, demo.stderr
        for mode in MODES:
            assert mode in demo.stdout, mode
        assert os.listdir(cwd) == [] and os.listdir(scratch) == [], (os.listdir(cwd),
                                                                       os.listdir(scratch))
    print("ok")


if __name__ == "__main__":
    main()
