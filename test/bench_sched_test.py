#!/usr/bin/python3
"""`objectcache bench sched` end to end on its small smoke workload: it exits 0 (every request
checks every byte it received), and the JSON has a row per cap and policy with the promised
fields. The numbers are not asserted (they are measurements)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import objectcache_binary  # noqa: E402

POLICIES = ["equal", "bytes", "compute-aware"]
FIELDS = ["workload", "policy", "mean_added_ms", "p99_added_ms", "ratio_vs_equal"]


def main():
    binary = objectcache_binary()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "sched.json")
        run = subprocess.run([binary, "bench", "sched", "--workload", "smoke", "--repeats", "1",
                              "--json", out, "--dir", os.path.join(tmp, "scratch")],
                             capture_output=True, text=True, timeout=300)
        print(run.stdout)
        assert run.returncode == 0, run.stderr
        rows = json.load(open(out))["rows"]
        assert len(rows) == 2 * len(POLICIES), rows
        for r in rows:
            for f in FIELDS:
                assert f in r, (f, r)
            assert r["workload"] == "smoke" and r["policy"] in POLICIES
            assert len(r["added_ms"]) == 2
        assert all(r["ratio_vs_equal"] == 1 for r in rows if r["policy"] == "equal")
        bad = subprocess.run([binary, "bench", "sched", "--workload", "nope", "--dir",
                              os.path.join(tmp, "bad")], capture_output=True, text=True)
        assert bad.returncode != 0 and "no such workload" in bad.stderr, bad.stderr
        bad_cap = subprocess.run([binary, "serve", "--bandwidth-cap", "fast", "--anonymous"],
                                 capture_output=True, text=True, timeout=30)
        assert bad_cap.returncode != 0 and "bandwidth" in bad_cap.stderr, bad_cap.stderr
    print("ok")


if __name__ == "__main__":
    main()
