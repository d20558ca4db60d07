#!/usr/bin/python3
"""Independent reference implementation of ObjectCache chunk keys (docs/keys.md).

Written from the spec, not from the C++ code, with Debian's python3-xxhash. It prints the keys
for a token list so that tests can compare them with `objectcache kv keys`:

  keys_reference.py --model llama-3.1-8b --layers 32 --kv-heads 8 --head-dim 128 --dtype bf16 \
      --tokens-per-chunk 16 [--latent] [--tenant SALT] [--adapter NAME] [--cache-salt SALT] TOKEN...
"""
import argparse
import struct
import sys

import xxhash

DTYPES = {"bf16": 1, "fp16": 2, "fp8": 3, "fp32": 4}


def layout_fingerprint(layers, kv_heads, head_dim, dtype, tokens_per_chunk, latent=False):
    record = b"OCLAYOUT" + struct.pack("<6I", 1, layers, kv_heads, head_dim, DTYPES[dtype],
                                       tokens_per_chunk)
    if latent:
        record += struct.pack("<I", 1)
    return xxhash.xxh3_64_intdigest(record, seed=0)


def text(value):
    b = value.encode()
    return struct.pack("<I", len(b)) + b


def namespace_id(model, fingerprint, tenant, adapter="", cache_salt=""):
    record = b"OCKEYNS1" + text(model) + struct.pack("<Q", fingerprint) + text(tenant)
    if adapter or cache_salt:
        record += text(adapter) + text(cache_salt)
    return xxhash.xxh3_128_digest(record, seed=0)  # canonical: big-endian


def chunk_keys(ns, tokens_per_chunk, tokens):
    parent = bytes(16)
    keys = []
    for start in range(0, len(tokens) - tokens_per_chunk + 1, tokens_per_chunk):
        chunk = tokens[start:start + tokens_per_chunk]
        parent = xxhash.xxh3_128_digest(parent + ns + struct.pack(f"<{len(chunk)}I", *chunk),
                                        seed=0)
        keys.append(parent.hex())
    return keys


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--kv-heads", type=int, required=True)
    p.add_argument("--head-dim", type=int, required=True)
    p.add_argument("--dtype", required=True, choices=sorted(DTYPES))
    p.add_argument("--tokens-per-chunk", type=int, default=16)
    p.add_argument("--latent", action="store_true")
    p.add_argument("--tenant", default="")
    p.add_argument("--adapter", default="")
    p.add_argument("--cache-salt", default="")
    p.add_argument("tokens", nargs="*", type=int)
    a = p.parse_args()
    fp = layout_fingerprint(a.layers, a.kv_heads, a.head_dim, a.dtype, a.tokens_per_chunk,
                            a.latent)
    ns = namespace_id(a.model, fp, a.tenant, a.adapter, a.cache_salt)
    print(f"fingerprint {fp:016x}")
    print(f"namespace {ns.hex()}")
    for k in chunk_keys(ns, a.tokens_per_chunk, a.tokens):
        print(k)
    return 0


if __name__ == "__main__":
    sys.exit(main())
