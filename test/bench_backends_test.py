#!/usr/bin/python3
"""`objectcache bench backends` end to end on a small prefix against the real single-node Ceph of
the ctest fixture ($OBJECTCACHE_TEST_CEPH): it exits 0 (every path checks every byte it
received), and the JSON has a row per context and read path, and one for each gateway fleet
(one gateway, two over the same pool), with the promised fields. The
numbers are not asserted (they are measurements)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import objectcache_binary  # noqa: E402

PATHS = ["radosgw S3-CW", "radosgw S3-LW", "ours/rados S3-LW", "ours/rados S3Agg-LW",
         "ours/local S3Agg-LW"]
SEQ = "librados seq (16)"  # the same objects whole through librados, no TTFT
FLEET = ["fleet: 1 gateway", "fleet: 2 gateways"]  # retrievals at once, no TTFT
FIELDS = ["context", "path", "backend", "mode", "gbps", "ratio_vs_radosgw", "cpu_s_per_gib",
          "cpu_s_per_gib_by_process"]
TTFT_FIELDS = ["ttft_ms", "added_ms"]
FLEET_FIELDS = ["context", "path", "backend", "mode", "gateways", "readers", "gbps",
                "ratio_vs_1_gateway", "gateways_cpu_s_per_gib", "cpu_s_per_gib",
                "cpu_s_per_gib_by_process"]


def main():
    binary = objectcache_binary()
    ceph = os.environ["OBJECTCACHE_TEST_CEPH"]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "backends.json")
        run = subprocess.run([binary, "bench", "backends", "--ceph", ceph, "--context", "256,512",
                              "--repeats", "1", "--fleet-readers", "2", "--json", out, "--dir",
                              os.path.join(tmp, "scratch")],
                             capture_output=True, text=True, timeout=600)
        print(run.stdout)
        assert run.returncode == 0, run.stderr
        report = json.load(open(out))
        rows = report["rows"]
        assert [(r["context"], r["path"]) for r in rows] == \
            [(c, p) for c in (256, 512) for p in PATHS + [SEQ]] + [(256, p) for p in FLEET], rows
        for r in rows:
            fields = FIELDS + TTFT_FIELDS if r["path"] in PATHS else \
                FIELDS if r["path"] == SEQ else FLEET_FIELDS
            for f in fields:
                assert f in r, (f, r)
            assert r["gbps"] > 0 and r.get("ttft_ms", 1) > 0, r
            # Every path costs CPU somewhere: at least this process's, which reads.
            assert r["cpu_s_per_gib"] > 0 and r["cpu_s_per_gib_by_process"]["client"] > 0, r
        assert all(r["ratio_vs_radosgw"] == 1 for r in rows if r["path"] == "radosgw S3-LW")
        fleet = {r["path"]: r for r in rows if r["path"] in FLEET}
        assert [fleet[p]["gateways"] for p in FLEET] == [1, 2], fleet
        assert fleet[FLEET[0]]["ratio_vs_1_gateway"] == 1, fleet
        # Both gateways served the two-gateway run (keys are spread over them).
        two = fleet[FLEET[1]]["cpu_s_per_gib_by_process"]
        assert two["ours/rados gateway"] > 0 and two["ours/rados gateway 2"] > 0, two
        assert fleet[FLEET[0]]["cpu_s_per_gib_by_process"]["ours/rados gateway"] > 0, fleet
        for metric in ["gbps_radosgw_lw_512", "gbps_rados_agg_lw_512", "ratio_vs_radosgw_512",
                       "ttft_ms_rados_agg_lw_512", "rados_seq_gbps_512",
                       "agg_lw_vs_radosgw_cw_512", "agg_lw_vs_rados_seq_512",
                       "rados_agg_lw_ceiling_gbps_512", "rados_agg_lw_added_pct_512",
                       "gateway_cpu_s_per_gib_512", "radosgw_cpu_s_per_gib_512",
                       "gateway_cpu_ratio_vs_radosgw_512", "fleet_gbps_1_gateway",
                       "fleet_gbps_2_gateways", "fleet_ratio_2_vs_1"]:
            assert metric in report["metrics"], report["metrics"]
        # No cluster there: a clear error, nonzero exit.
        bad = subprocess.run([binary, "bench", "backends", "--ceph", os.path.join(tmp, "none"),
                              "--dir", os.path.join(tmp, "bad")], capture_output=True, text=True,
                             timeout=60)
        assert bad.returncode != 0 and "scripts/ceph-dev start" in bad.stderr, bad.stderr
    print("ok")


if __name__ == "__main__":
    main()
