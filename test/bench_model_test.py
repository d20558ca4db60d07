#!/usr/bin/python3
"""`objectcache bench model` (which runs `python3 -m objectcache.bench_model`) on a tiny model end
to end from the build tree, with no PYTHONPATH set: it exits 0 and its JSON has the metrics and
rows the issue names (docs/benchmarks.md). It asserts no duration.

  bench_model_test.py --objectcache BINARY
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import objectcache_binary  # noqa: E402

METRICS = ["ttft_ms", "speedup_vs_recompute", "added_vs_dram_ms", "save_overhead_pct",
           "save_forward_pct", "store_after_prefill_ms", "python_vs_cpp_ratio"]
CASES = ["0", "50", "87.5"]


def main():
    binary = objectcache_binary()
    # The binary finds the package the build put beside it.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "model.json")
        run = subprocess.run(
            [binary, "bench", "model",
             "--tokens", "256", "--hidden", "64", "--layers", "2", "--heads", "4",
             "--kv-heads", "2", "--reps", "1", "--save-pairs", "1", "--dir", tmp, "--json", out],
            capture_output=True, text=True, timeout=300, env=env)
        print(run.stdout)
        assert run.returncode == 0, run.stderr
        report = json.load(open(out))
        metrics = report["metrics"]
        for m in METRICS:
            assert m in metrics, m
        for m in ["ttft_ms", "speedup_vs_recompute", "added_vs_dram_ms"]:
            assert sorted(metrics[m]) == sorted(CASES), metrics[m]
        assert metrics["ttft_ms"]["87.5"] > 0 and metrics["python_vs_cpp_ratio"] > 0
        rows = report["rows"]
        assert [r["cached_tokens"] for r in rows] == [0, 128, 224], rows
        assert all(len(r["samples_ms"][k]) == 1 for r in rows for k in r["samples_ms"]), rows
        assert len(report["save_pairs_pct"]) == 2, report  # one repeat + one extra pair
        assert os.listdir(tmp) == ["model.json"], os.listdir(tmp)  # its scratch is gone
        bad = subprocess.run([binary, "bench", "model", "--tokens", "8"], capture_output=True,
                             text=True, env=env)
        assert bad.returncode != 0 and "tokens" in bad.stderr, bad.stderr
        usage = subprocess.run([binary, "bench", "model", "--help"], capture_output=True,
                               text=True, env=env)
        assert usage.returncode == 0 and "--preset" in usage.stdout, usage
    print("ok")


if __name__ == "__main__":
    main()
