"""`bench model`: time to first token of the reference engine (objectcache.engine) with part of
the prompt cached in ObjectCache, against a full recompute and against the same KV already in
process DRAM; the save path's cost; Python retrieval against the C++ client's.

    python3 -m objectcache.bench_model --objectcache build/bin/objectcache [--json PATH]
    python3 -m objectcache.bench_model --objectcache ... --device cuda --preset llama-3.1-8b

It starts `objectcache serve` on 127.0.0.1 over a local store in a temporary directory, stores
the prompt's KV once through the engine's own save path, then runs every case interleaved
(recompute; ObjectCache with the connector saving the new tokens, as an engine runs it;
ObjectCache loading only; the same KV already in process DRAM, pinned on a GPU and copied in
layer by layer) with a fresh uncached suffix each time, and reports medians. Then, per case,
one prompt through all of them: the logits compared. Metrics (docs/python.md): ttft_ms,
ttft_load_only_ms, speedup_vs_recompute, added_vs_dram_ms, added_vs_dram_pct,
logits_rel_diff_vs_recompute and logits_equal_dram keyed by the percentage cached;
save_overhead_pct, save_forward_pct, store_after_prefill_ms, python_vs_cpp_ratio (CPU only).
"""
from __future__ import annotations

import argparse
import dataclasses
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
    """PUT /bucket signed with SigV4 (the standard library's, so that a GPU machine without
    boto3 runs this too)."""
    import datetime
    import hashlib
    import hmac
    import urllib.request

    host = endpoint.split("://", 1)[1]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    scope = f"{stamp[:8]}/us-east-1/s3/aws4_request"
    empty = hashlib.sha256(b"").hexdigest()
    signed = "host;x-amz-content-sha256;x-amz-date"
    canonical = (f"PUT\n/{bucket}\n\nhost:{host}\nx-amz-content-sha256:{empty}\n"
                 f"x-amz-date:{stamp}\n\n{signed}\n{empty}")
    to_sign = (f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n"
               f"{hashlib.sha256(canonical.encode()).hexdigest()}")
    key = ("AWS4" + SECRET).encode()
    for part in scope.split("/"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    request = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT", headers={
        "x-amz-date": stamp, "x-amz-content-sha256": empty,
        "Authorization": f"AWS4-HMAC-SHA256 Credential={ACCESS}/{scope}, "
                         f"SignedHeaders={signed}, Signature={signature}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


# Model shapes by name: Llama-3.1-8B's (its weights random).
PRESETS = {"llama-3.1-8b": dict(vocab_size=128256, hidden=4096, layers=32, heads=32, kv_heads=8,
                                intermediate=14336)}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def timed(fn, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the logits are computed, not only queued
    return time.perf_counter() - t0, out


class PinnedPrefix:
    """The baseline's loads: the prefix's KV already in this process's memory (pinned, for a
    GPU), copied into the engine's blocks layer by layer on a stream of its own, each layer's
    attention waiting for its copy, as the connector's loads are waited for. It stands in for
    the connector's worker side."""

    def __init__(self, layers, cache: eng.PagedKvCache):
        self.layers, self.cache, self.events = layers, cache, {}
        self.cuda = cache.device.type == "cuda"
        self.stream = torch.cuda.Stream(cache.device) if self.cuda else None

    def load(self, names, blocks, chunks) -> None:
        index = self.cache.block_table(blocks[:chunks])
        self.events = {}
        if not self.cuda:
            for layer in range(len(names)):
                self.cache.layers[layer][index] = self.layers[layer][:chunks]
            return
        self.stream.wait_stream(torch.cuda.current_stream(self.cache.device))
        index.record_stream(self.stream)
        with torch.cuda.stream(self.stream):
            for layer, name in enumerate(names):
                src = self.layers[layer][:chunks].to(self.cache.device, non_blocking=True)
                self.cache.layers[layer].index_copy_(0, index, src)
                self.events[name] = torch.cuda.Event()
                self.events[name].record(self.stream)

    def wait_for_layer_load(self, name) -> None:
        if name in self.events:
            torch.cuda.current_stream(self.cache.device).wait_event(self.events[name])

    def has_load_error(self, request_id) -> bool:
        return False

    def save_kv_layer(self, *args) -> None:
        pass


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    shape = dict(vocab_size=4096, hidden=args.hidden, layers=args.layers, heads=args.heads,
                 kv_heads=args.kv_heads, intermediate=int(args.hidden * 8 / 3) // 16 * 16)
    shape.update(PRESETS.get(args.preset, {}))
    cfg = eng.ModelConfig(**shape, dtype=DTYPES[args.dtype], device=args.device)
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
            # A prompt's new KV waits in host memory until stored: room for two prompts.
            kv_bytes_per_token = 2 * cfg.layers * cfg.kv_heads * cfg.head_dim * \
                torch.tensor([], dtype=cfg.dtype).element_size()
            conf = kvc.ConnectorConfig([server.endpoint], "bench", eng.layout_for(cfg, g),
                                       access_key=ACCESS, secret_key=SECRET,
                                       write_behind_bytes=max(1 << 30, 2 * n * kv_bytes_per_token),
                                       aggregated_streams=args.streams)
            cached_engine = eng.Engine(model, blocks, conf)
            loading = eng.Engine(model, blocks, dataclasses.replace(conf, saves=False))
            plain = eng.Engine(model, blocks)
            cached_engine.prefill(eng.Request("store", base))
            cached_engine.worker.flush()
            layout = conf.layout
            keys = cached_engine.worker.keys_for(eng.Request("k", base))

            # The same KV in process DRAM: per layer [chunks, 2, G, kv_heads, head_dim].
            dram = [torch.empty(len(keys), 2, g, cfg.kv_heads, cfg.head_dim, dtype=cfg.dtype,
                                pin_memory=device.type == "cuda") for _ in range(cfg.layers)]
            cached_engine.worker.client.retrieve_layerwise(keys, cfg.layers, dram).wait()
            dram_engine = eng.Engine(model, blocks)
            dram_engine.worker = PinnedPrefix(dram, dram_engine.cache)

            def dram_prefill(tokens, cached):
                e = dram_engine
                blk = e.cache.allocate(len(tokens))
                try:
                    e.worker.load(e.layer_names, blk, cached // g)
                    logits, _ = e._forward(eng.Request("d", tokens), tokens, blk, cached)
                    return logits
                finally:
                    e.cache.release(blk)

            def connector_prefill(e, tokens, cached):
                e.worker.save_seconds = 0.0
                s, r = timed(lambda: e.prefill(eng.Request("o", tokens)), device)
                assert r.cached_tokens == cached, (r.cached_tokens, cached)
                t0 = time.perf_counter()
                e.worker.flush()  # stores behind the prefill, not in it
                if cached == 0 and e is cached_engine:
                    save_forward.append(e.worker.save_seconds / s)
                    store_after.append(time.perf_counter() - t0)
                return s, r.logits

            def run_one(kind, tokens, cached):
                """(seconds, logits) of one prefill of this kind."""
                if kind == "recompute":
                    s, r = timed(lambda: plain.prefill(eng.Request("r", tokens)), device)
                    return s, r.logits
                if kind == "dram":
                    return timed(lambda: dram_prefill(tokens, cached), device)
                return connector_prefill(cached_engine if kind == "objectcache" else loading,
                                         tokens, cached)

            fractions = [0.0, 0.5, 0.875]
            kinds = ["recompute", "objectcache", "load_only", "dram"]
            samples = {f: {k: [] for k in kinds} for f in fractions}
            save_forward, store_after = [], []
            for f in fractions:  # a warm-up of each (kernels chosen, memory pools grown)
                cached = int(n * f) // g * g
                for kind in kinds:
                    run_one(kind, base[:cached] + fresh(n - cached), cached)
            save_forward.clear()
            store_after.clear()
            for rep in range(args.reps):
                for f in fractions:
                    cached = int(n * f) // g * g
                    runs = kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]  # rotating
                    for kind in runs:
                        tokens = base[:cached] + fresh(n - cached)
                        samples[f][kind].append(run_one(kind, tokens, cached)[0])

            # One prompt through every kind: restored KV gives the logits of the same KV from
            # DRAM bit for bit, and the recompute's within the dtype's rounding.
            logits_check = {}
            for f in fractions[1:]:
                cached = int(n * f) // g * g
                tokens = base[:cached] + fresh(n - cached)
                # The saving kind last: it stores the suffix, which the others must not find.
                out = {k: run_one(k, tokens, cached)[1].float()
                       for k in ("recompute", "load_only", "dram", "objectcache")}
                ref = out["recompute"]
                logits_check[f] = {
                    "rel_diff_vs_recompute": max(
                        float((out[k] - ref).abs().max() / ref.abs().max())
                        for k in ("objectcache", "load_only")),
                    "same_argmax": all(int(out[k].argmax()) == int(ref.argmax())
                                       for k in ("objectcache", "load_only")),
                    "equal_dram": all(torch.equal(out[k], out["dram"])
                                      for k in ("objectcache", "load_only"))}
            # The save path's cost end to end: prefill with it against without, pairs run back to
            # back (the repeats' and as many more as --save-pairs, alternating which goes first),
            # since its cost is small against this machine's noise.
            save_e2e = [o / r - 1 for o, r in zip(samples[0.0]["objectcache"],
                                                  samples[0.0]["recompute"])]
            for i in range(args.save_pairs):
                tokens = fresh(n)
                pair = {k: run_one(k, tokens, 0)[0] for k in
                        (("recompute", "objectcache") if i % 2 else ("objectcache", "recompute"))}
                save_e2e.append(pair["objectcache"] / pair["recompute"] - 1)

            # Python into torch tensors against the C++ client on the same request (host
            # memory: on a GPU the device path above is what an engine uses).
            client = cached_engine.worker.client
            py_s, cpp_s = [], []
            if device.type == "cpu":
                size = torch.tensor([], dtype=cfg.dtype).element_size()
                dest = [torch.empty(len(keys), layout.layer_slice_bytes // size, dtype=cfg.dtype)
                        for _ in range(cfg.layers)]
                for _ in range(args.reps * 3):
                    cpp_s.append(client._cpp_retrieval_seconds(keys, cfg.layers))
                    s, _ = timed(lambda: client.retrieve_layerwise(keys, cfg.layers, dest).wait(),
                                 device)
                    py_s.append(s)
            for e in (cached_engine, loading):
                e.close()
        finally:
            server.stop()

    ms = lambda v: round(statistics.median(v) * 1000, 1)  # noqa: E731
    rows, by_case = [], {m: {} for m in (
        "ttft_ms", "ttft_load_only_ms", "speedup_vs_recompute", "added_vs_dram_ms",
        "added_vs_dram_pct", "logits_rel_diff_vs_recompute", "logits_equal_dram")}
    for f in fractions:
        name, s = f"{f * 100:g}", samples[f]
        row = {"cached_pct": f * 100, "cached_tokens": int(n * f) // g * g,
               "ttft_ms": ms(s["objectcache"]), "ttft_load_only_ms": ms(s["load_only"]),
               "recompute_ms": ms(s["recompute"]), "dram_ms": ms(s["dram"]),
               "speedup_vs_recompute": round(statistics.median(s["recompute"]) /
                                             statistics.median(s["objectcache"]), 2),
               "added_vs_dram_ms": round(ms(s["objectcache"]) - ms(s["dram"]), 1),
               # Loading alone against DRAM: what the cache adds to the prefill's wait.
               "added_vs_dram_pct": round((statistics.median(s["load_only"]) /
                                           statistics.median(s["dram"]) - 1) * 100, 2)}
        if f in logits_check:
            row["logits_rel_diff_vs_recompute"] = logits_check[f]["rel_diff_vs_recompute"]
            row["logits_same_argmax"] = logits_check[f]["same_argmax"]
            row["logits_equal_dram"] = logits_check[f]["equal_dram"]
        for m in by_case:
            if m in row:
                by_case[m][name] = row[m]
        row["samples_ms"] = {k: [round(x * 1000, 1) for x in v] for k, v in s.items()}
        rows.append(row)
    kv_bytes = len(keys) * layout.layer_slice_bytes * cfg.layers
    metrics = {
        **by_case,
        "save_overhead_pct": round(statistics.median(save_e2e) * 100, 2),
        "save_forward_pct": round(statistics.median(save_forward) * 100, 3),
        "store_after_prefill_ms": ms(store_after),
    }
    if py_s:
        metrics.update({
            "python_vs_cpp_ratio": round(statistics.median(cpp_s) / statistics.median(py_s), 3),
            "python_gbit_s": round(kv_bytes * 8 / statistics.median(py_s) / 1e9, 2),
            "cpp_gbit_s": round(kv_bytes * 8 / statistics.median(cpp_s) / 1e9, 2)})
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {"config": {"tokens": n, "hidden": cfg.hidden, "layers": cfg.layers,
                       "heads": cfg.heads, "kv_heads": cfg.kv_heads,
                       "intermediate": cfg.intermediate, "vocab_size": cfg.vocab_size,
                       "dtype": args.dtype, "device": args.device, "gpu": gpu,
                       "kv_bytes": kv_bytes, "reps": args.reps, "threads": args.threads,
                       "streams": args.streams},
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
    p.add_argument("--reps", "--repeats", "--rounds", dest="reps", type=int, default=5)
    p.add_argument("--save-pairs", type=int, default=6,
                   help="extra pairs of 0%%-cached prefills with and without saving")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--device", default="cpu", help="torch device of the model: cpu, cuda, cuda:N")
    p.add_argument("--streams", type=int, default=0,
                   help="connections a retrieval uses (0: one per 4 cores, 1 to 8)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help="a model's shapes (random weights), overriding --hidden and the others")
    p.add_argument("--dir", help="scratch directory (default: the system's temporary one)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    if args.tokens < 64:
        p.error("--tokens must be at least 64 (4 chunks of 16)")
    if args.hidden % args.heads or args.heads % args.kv_heads or args.reps < 1 or args.streams < 0 \
            or args.save_pairs < 0:
        p.error("--hidden must divide by --heads, --heads by --kv-heads; --reps >= 1, "
                "--save-pairs >= 0, --streams >= 0")
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        p.error(f"--device {args.device}: torch sees no CUDA device")
    result = run(args)
    c = result["config"]
    print(f"reference model on {c['gpu'] or c['device']}: {c['layers']} layers, hidden "
          f"{c['hidden']}, {c['heads']} heads, {c['kv_heads']} KV heads, {c['dtype']}; prompt "
          f"{c['tokens']} tokens ({c['kv_bytes'] / 2**20:.0f} MiB of KV); medians of {c['reps']}")
    print(f"{'cached':>7} {'tokens':>7} {'recompute ms':>13} {'ObjectCache ms':>15} "
          f"{'loads only ms':>14} {'DRAM ms':>9} {'speedup':>8} {'vs DRAM':>8} {'logits':>22}")
    for r in result["rows"]:
        logits = "" if "logits_equal_dram" not in r else (
            f"{'=DRAM' if r['logits_equal_dram'] else '!=DRAM'} "
            f"{r['logits_rel_diff_vs_recompute']:.1e}"
            f"{'' if r['logits_same_argmax'] else ' argmax!'}")
        print(f"{r['cached_pct']:>6g}% {r['cached_tokens']:>7} {r['recompute_ms']:>13} "
              f"{r['ttft_ms']:>15} {r['ttft_load_only_ms']:>14} {r['dram_ms']:>9} "
              f"{r['speedup_vs_recompute']:>7}x {r['added_vs_dram_pct']:>+7.1f}% {logits:>22}")
    m = result["metrics"]
    print(f"save path: {m['save_overhead_pct']}% of prefill end to end, "
          f"{m['save_forward_pct']}% on the forward path; storing went on "
          f"{m['store_after_prefill_ms']} ms after the prefill")
    if "python_vs_cpp_ratio" in m:
        print(f"retrieve_layerwise from Python into torch: {m['python_gbit_s']} Gbit/s, C++ "
              f"client {m['cpp_gbit_s']} Gbit/s: ratio {m['python_vs_cpp_ratio']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
