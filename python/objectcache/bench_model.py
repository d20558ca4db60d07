"""`bench model`: time to first token of the reference engine (objectcache.engine) with part of
the prompt cached in ObjectCache, against a full recompute and against the same KV already in
process DRAM; the save path's cost; Python retrieval against the C++ client's.

    python3 -m objectcache.bench_model --objectcache build/bin/objectcache [--json PATH]

It starts `objectcache serve` on 127.0.0.1 over a local store in a temporary directory, stores
the prompt's KV once through the engine's own save path, then runs every case interleaved
(recompute, ObjectCache, DRAM in turn) with a fresh uncached suffix each time, and reports
medians. Metrics (docs/python.md): ttft_ms, speedup_vs_recompute and added_vs_dram_ms keyed
by the percentage cached, save_overhead_pct, save_forward_pct, store_after_prefill_ms, python_vs_cpp_ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# Torch's OpenMP threads otherwise spin between operations, taking the cores that OpenBLAS's
# threads, the retrieval's threads and the server need on a small machine (docs/python.md).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

from . import connector as kvc
from . import engine as eng

ACCESS, SECRET = "bench-access-key", "bench-secret-key-0123456789"


class Server:
    def __init__(self, binary: str, root: str):
        port_file = os.path.join(root, "port")
        env = dict(os.environ, OBJECTCACHE_ACCESS_KEY=ACCESS, OBJECTCACHE_SECRET_KEY=SECRET)
        self.log = open(os.path.join(root, "server.log"), "wb")
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", "127.0.0.1:0", "--store", os.path.join(root, "store"),
             "--port-file", port_file], stdout=self.log, stderr=self.log, env=env)
        for _ in range(200):
            if os.path.exists(port_file) or self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if self.proc.poll() is not None:
            raise RuntimeError("objectcache serve exited; see " + self.log.name)
        with open(port_file) as f:
            self.endpoint = f"http://127.0.0.1:{int(f.read())}"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


def create_bucket(endpoint: str, bucket: str) -> None:
    import boto3
    from botocore.config import Config
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS,
                      aws_secret_access_key=SECRET, region_name="us-east-1",
                      config=Config(signature_version="s3v4"))
    s3.create_bucket(Bucket=bucket)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    cfg = eng.ModelConfig(vocab_size=4096, hidden=args.hidden, layers=args.layers,
                          heads=args.heads, kv_heads=args.kv_heads,
                          intermediate=int(args.hidden * 8 / 3) // 16 * 16)
    model = eng.ReferenceModel(cfg)
    g = 16
    n = args.tokens // g * g
    blocks = 2 * n // g + 8
    gen = torch.Generator().manual_seed(1)
    base = torch.randint(0, cfg.vocab_size, (n,), generator=gen).tolist()

    def fresh(length):
        return torch.randint(0, cfg.vocab_size, (length,), generator=gen).tolist()

    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        server = Server(args.objectcache, root)
        try:
            create_bucket(server.endpoint, "bench")
            conf = kvc.ConnectorConfig([server.endpoint], "bench", eng.layout_for(cfg, g),
                                       access_key=ACCESS, secret_key=SECRET,
                                       write_behind_bytes=1 << 30)
            cached_engine = eng.Engine(model, blocks, conf)
            plain = eng.Engine(model, blocks)
            cached_engine.prefill(eng.Request("store", base))
            cached_engine.worker.flush()
            layout = conf.layout
            keys = cached_engine.worker.keys_for(eng.Request("k", base))

            # The same KV in process DRAM: per layer [chunks, 2, G, kv_heads, head_dim].
            dram = [torch.empty(len(keys), 2, g, cfg.kv_heads, cfg.head_dim)
                    for _ in range(cfg.layers)]
            cached_engine.worker.client.retrieve_layerwise(keys, cfg.layers, dram).wait()

            def dram_prefill(tokens, cached):
                e = plain
                blk = e.cache.allocate(len(tokens))
                try:
                    chunks = cached // g
                    index = torch.tensor(blk[:chunks], dtype=torch.long)
                    for layer in range(cfg.layers):
                        e.cache.layers[layer][index] = dram[layer][:chunks]
                    logits, _ = e._forward(eng.Request("d", tokens), tokens, blk, cached)
                    return logits
                finally:
                    e.cache.release(blk)

            def run_one(kind, tokens, cached):
                if kind == "recompute":
                    return timed(lambda: plain.prefill(eng.Request("r", tokens)))[0]
                if kind == "dram":
                    return timed(lambda: dram_prefill(tokens, cached))[0]
                cached_engine.worker.save_seconds = 0.0
                s, r = timed(lambda: cached_engine.prefill(eng.Request("o", tokens)))
                assert r.cached_tokens == cached, (r.cached_tokens, cached)
                t0 = time.perf_counter()
                cached_engine.worker.flush()  # stores behind the prefill, not in it
                if cached == 0:
                    save_forward.append(cached_engine.worker.save_seconds / s)
                    store_after.append(time.perf_counter() - t0)
                return s

            fractions = [0.0, 0.5, 0.875]
            samples = {f: {"recompute": [], "objectcache": [], "dram": []} for f in fractions}
            save_forward, store_after = [], []
            for rep in range(args.reps):
                for f in fractions:
                    cached = int(n * f) // g * g
                    runs = ["recompute", "objectcache", "dram"]
                    runs = runs[rep % 3:] + runs[:rep % 3]  # interleaved, rotating
                    for kind in runs:
                        tokens = base[:cached] + fresh(n - cached)
                        samples[f][kind].append(run_one(kind, tokens, cached))
            # The save path's cost end to end: prefill with it against without, pairs run back to
            # back (the repeats' and as many more as --save-pairs, alternating which goes first),
            # since its cost is small against this machine's noise.
            save_e2e = [o / r - 1 for o, r in zip(samples[0.0]["objectcache"],
                                                  samples[0.0]["recompute"])]
            for i in range(args.save_pairs):
                tokens = fresh(n)
                pair = {k: run_one(k, tokens, 0) for k in
                        (("recompute", "objectcache") if i % 2 else ("objectcache", "recompute"))}
                save_e2e.append(pair["objectcache"] / pair["recompute"] - 1)

            # Python into torch tensors against the C++ client on the same request.
            client = cached_engine.worker.client
            dest = [torch.empty(len(keys), layout.layer_slice_bytes // 4)
                    for _ in range(cfg.layers)]
            py_s, cpp_s = [], []
            for _ in range(args.reps * 3):
                cpp_s.append(client._cpp_retrieval_seconds(keys, cfg.layers))
                s, _ = timed(lambda: client.retrieve_layerwise(keys, cfg.layers, dest).wait())
                py_s.append(s)
            cached_engine.close()
        finally:
            server.stop()

    ms = lambda v: round(statistics.median(v) * 1000, 1)  # noqa: E731
    rows, ttft, speedup, added = [], {}, {}, {}
    for f in fractions:
        name = f"{f * 100:g}"
        s = samples[f]
        ttft[name] = ms(s["objectcache"])
        speedup[name] = round(statistics.median(s["recompute"]) /
                              statistics.median(s["objectcache"]), 2)
        added[name] = round(ms(s["objectcache"]) - ms(s["dram"]), 1)
        rows.append({"cached_pct": f * 100, "cached_tokens": int(n * f) // g * g,
                     "ttft_ms": ttft[name], "recompute_ms": ms(s["recompute"]),
                     "dram_ms": ms(s["dram"]), "speedup_vs_recompute": speedup[name],
                     "added_vs_dram_ms": added[name],
                     "samples_ms": {k: [round(x * 1000, 1) for x in v] for k, v in s.items()}})
    kv_bytes = len(keys) * layout.layer_slice_bytes * cfg.layers
    metrics = {
        "ttft_ms": ttft,
        "speedup_vs_recompute": speedup,
        "added_vs_dram_ms": added,
        "save_overhead_pct": round(statistics.median(save_e2e) * 100, 2),
        "save_forward_pct": round(statistics.median(save_forward) * 100, 3),
        "store_after_prefill_ms": ms(store_after),
        "python_vs_cpp_ratio": round(statistics.median(cpp_s) / statistics.median(py_s), 3),
        "python_gbit_s": round(kv_bytes * 8 / statistics.median(py_s) / 1e9, 2),
        "cpp_gbit_s": round(kv_bytes * 8 / statistics.median(cpp_s) / 1e9, 2),
    }
    return {"config": {"tokens": n, "hidden": cfg.hidden, "layers": cfg.layers,
                       "heads": cfg.heads, "kv_heads": cfg.kv_heads, "dtype": "fp32",
                       "kv_bytes": kv_bytes, "reps": args.reps, "threads": args.threads},
            "metrics": metrics, "rows": rows,
            "save_pairs_pct": [round(x * 100, 2) for x in save_e2e]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--objectcache", default="objectcache", help="the objectcache binary")
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--save-pairs", type=int, default=6,
                   help="extra pairs of 0%%-cached prefills with and without saving")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--dir", help="scratch directory (default: the system's temporary one)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    if args.tokens < 64:
        p.error("--tokens must be at least 64 (4 chunks of 16)")
    if args.hidden % args.heads or args.heads % args.kv_heads or args.reps < 1 \
            or args.save_pairs < 0:
        p.error("--hidden must divide by --heads, --heads by --kv-heads; --reps >= 1, "
                "--save-pairs >= 0")
    result = run(args)
    c = result["config"]
    print(f"reference model: {c['layers']} layers, hidden {c['hidden']}, {c['heads']} heads, "
          f"{c['kv_heads']} KV heads, fp32; prompt {c['tokens']} tokens "
          f"({c['kv_bytes'] / 2**20:.0f} MiB of KV); medians of {c['reps']}")
    print(f"{'cached':>7} {'tokens':>7} {'recompute ms':>13} {'ObjectCache ms':>15} "
          f"{'DRAM ms':>9} {'speedup':>8} {'added vs DRAM ms':>17}")
    for r in result["rows"]:
        print(f"{r['cached_pct']:>6g}% {r['cached_tokens']:>7} {r['recompute_ms']:>13} "
              f"{r['ttft_ms']:>15} {r['dram_ms']:>9} {r['speedup_vs_recompute']:>7}x "
              f"{r['added_vs_dram_ms']:>17}")
    m = result["metrics"]
    print(f"save path: {m['save_overhead_pct']}% of prefill end to end, "
          f"{m['save_forward_pct']}% on the forward path; storing went on "
          f"{m['store_after_prefill_ms']} ms after the prefill")
    print(f"retrieve_layerwise from Python into torch: {m['python_gbit_s']} Gbit/s, C++ client "
          f"{m['cpp_gbit_s']} Gbit/s: ratio {m['python_vs_cpp_ratio']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
