"""An SGLang HiCache storage backend (its third tier, below GPU and host memory) on ObjectCache
(docs/python.md, "SGLang").

    python -m sglang.launch_server ... --enable-hierarchical-cache \\
      --hicache-storage-backend dynamic --hicache-storage-backend-extra-config '{
        "backend_name": "objectcache", "module_path": "objectcache.sglang_storage",
        "class_name": "ObjectCacheStorage",
        "endpoints": ["http://127.0.0.1:9000"], "bucket": "kv",
        "access_key": "...", "secret_key": "..."}'

SGLang hands the backend pages of its host KV pool: one key a page (64 hex digits, a SHA-256
chained over the page's tokens and the pages before it), the page as one flat tensor in the
pool's own arrangement (`get_data_page`), `page_size` tokens. Each page is stored as one chunk
object: the page's bytes in order, a chunk of `page_size` tokens of a layout with the pool's
layers, heads, head size and dtype, every layer slice checksummed, so every byte a load returns
is checked. A page's key is SHA-256 over a namespace and SGLang's key: the model, the pool's
memory layout (`layer_first`, `page_first`, ...: the byte order inside the page), the dtype,
the page size, and the tensor- and pipeline-parallel rank unless the model is MLA (whose ranks
hold the same latents; SGLang lets only rank 0 write them). Pages of another arrangement or
rank never share a key.

Loads are prefix loads, as SGLang's chained keys are: `batch_exists` is one lookup request,
`batch_get` one aggregated retrieval of the leading pages that exist; a page that does not
arrive verified, and every page after it, come back None (SGLang then stops its prefetch
there). `batch_set` stores and waits until the server has them.
"""
from __future__ import annotations

import hashlib

import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage

from . import Client, Error, layout_for_model

# Keys of the extra config that are ours (the rest are SGLang's own: backend_name, ...).
_CLIENT_OPTIONS = ("access_key", "secret_key", "ca_file", "timeout", "retries",
                   "write_behind_bytes", "aggregated_streams")


class ObjectCacheStorage(HiCacheStorage):
    """Built by SGLang as `cls(storage_config, kwargs)`; usable once the host pool is
    registered (`register_mem_pool_host`)."""

    def __init__(self, storage_config, kwargs=None):
        extra = dict(storage_config.extra_config or {})
        missing = [k for k in ("endpoints", "bucket") if k not in extra]
        if missing:
            raise ValueError(f"objectcache: the extra config needs {missing}")
        self.config = storage_config
        self.endpoints = list(extra["endpoints"])
        self.bucket = extra["bucket"]
        self.options = {k: extra[k] for k in _CLIENT_OPTIONS if k in extra}
        self.client = self.layout = self.namespace = None
        self.page_bytes = 0
        self.failed_gets = 0

    # ---- setup -------------------------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host) -> None:
        super().register_mem_pool_host(mem_pool_host)
        self.layout, self.page_bytes = page_layout(mem_pool_host, self.config)
        self.namespace = page_namespace(mem_pool_host, self.config, self.layout)
        self.client = Client(self.endpoints, self.bucket, self.layout, **self.options)

    def key(self, sglang_key: str) -> bytes:
        """The chunk key of one of SGLang's page keys, in this backend's namespace."""
        return hashlib.sha256(self.namespace + b"\0" + sglang_key.encode()).digest()[:16]

    def _ready(self) -> Client:
        if self.client is None:
            raise RuntimeError("objectcache: no host memory pool registered yet")
        return self.client

    # ---- lookups -----------------------------------------------------------------------------

    def batch_exists(self, keys, extra_info=None) -> int:
        """How many leading pages are stored (one request)."""
        if not keys:
            return 0
        try:
            return self._ready().lookup([self.key(k) for k in keys])
        except Error:
            return 0  # an unreachable cache holds nothing

    def exists(self, key) -> bool:
        return self.batch_exists([key]) == 1

    # ---- loads -------------------------------------------------------------------------------

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        """Each page's flat tensor (written into target_locations[i] where given), or None for a
        page that is not stored or did not arrive verified, and for every page after it."""
        pages = [None] * len(keys)
        chunk_keys = [self.key(k) for k in keys[:self.batch_exists(keys)]]
        try:
            whole = self._retrieve(chunk_keys)
        except Error as e:
            # A damaged page fails the layers from its own for every page of the retrieval:
            # once more with the pages before it (none when the error names none).
            self.failed_gets += 1
            chunk_keys = chunk_keys[:_first_named(e, chunk_keys)]
            try:
                whole = self._retrieve(chunk_keys)
            except Error:
                return pages
        for j in range(len(whole)):
            target = None if target_locations is None else target_locations[j]
            pages[j] = _into(whole[j], target, self.page_bytes)
        return pages

    def _retrieve(self, chunk_keys):
        """The chunks' KV, [chunks, layers, slice] (a chunk's layer slices in order: the page's
        bytes as stored), every slice verified; only the leading chunks still stored."""
        lay = self.layout
        dtype = _torch_dtype(lay)
        itemsize = torch.tensor([], dtype=dtype).element_size()
        staging = torch.empty(lay.layers, len(chunk_keys), lay.layer_slice_bytes // itemsize,
                              dtype=dtype)
        if not chunk_keys:
            return staging.transpose(0, 1)
        retrieval = self._ready().retrieve_layerwise(chunk_keys, lay.layers, list(staging))
        retrieval.wait()
        return staging.transpose(0, 1)[:retrieval.hits]

    def get(self, key, target_location=None, target_sizes=None):
        return self.batch_get([key], None if target_location is None else [target_location])[0]

    # ---- stores ------------------------------------------------------------------------------

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None) -> bool:
        """Stores every page; True once the server holds all of them."""
        client = self._ready()
        if values is None or len(values) != len(keys):
            raise ValueError("objectcache: batch_set needs one value a key")
        dtype = _torch_dtype(self.layout)
        before = client.stats()
        for key, page in zip(keys, values):
            data = page.detach().contiguous().view(torch.uint8).reshape(-1)
            if data.numel() != self.page_bytes:
                raise ValueError(f"objectcache: a page of {data.numel()} bytes, the host pool's "
                                 f"pages have {self.page_bytes}")
            client.store(self.key(key), data.cpu().view(dtype))
        client.flush()
        after = client.stats()
        return all(after[k] == before[k] for k in ("failed", "dropped"))

    def set(self, key, value=None, target_location=None, target_sizes=None) -> bool:
        return self.batch_set([key], [value])

    def clear(self) -> None:
        """Nothing is deleted: the cache is shared with every other engine that uses it."""

    def close(self) -> None:
        if self.client is not None:
            self.client.flush()


def page_layout(pool, config):
    """The chunk layout of one page of `pool` (its layers, heads, head size, dtype, page size)
    and the page's bytes. A pool whose page is not what its shape says is refused."""
    dummy = pool.get_dummy_flat_data_page()
    page_bytes = dummy.numel() * dummy.element_size()
    layers, page = int(pool.layer_num), int(pool.page_size)
    dtype = getattr(pool, "dtype", None)
    itemsize = torch.tensor([], dtype=dtype).element_size()
    name = "sglang/" + (config.model_name or "model")
    if config.is_mla_model:
        width, rest = divmod(page_bytes, layers * page * itemsize)
        lay = layout_for_model(name, layers, 1, width, dtype, page, latent=True)
    else:
        heads, head_dim = int(pool.head_num), int(pool.head_dim)
        rest = page_bytes - 2 * layers * page * heads * head_dim * itemsize
        lay = layout_for_model(name, layers, heads, head_dim, dtype, page)
    if rest or lay.layers * lay.layer_slice_bytes != page_bytes:
        raise ValueError(f"objectcache: a host page of {page_bytes} bytes is not {layers} layers "
                         f"of {page} tokens of this pool's heads and dtype")
    return lay, page_bytes


def page_namespace(pool, config, layout) -> bytes:
    """Everything that changes a page's bytes for the same tokens."""
    parts = ["sglang-hicache-v1", config.model_name or "", getattr(pool, "layout", "") or "",
             str(getattr(pool, "dtype", "")), f"page{layout.tokens_per_chunk}",
             layout.to_json()]
    if not config.is_mla_model:
        parts.append(f"tp{config.tp_rank}.{config.tp_size}")
    if config.pp_size > 1:
        parts.append(f"pp{config.pp_rank}.{config.pp_size}")
    cp_size = getattr(config, "attn_cp_size", 1) or 1
    if cp_size > 1:
        parts.append(f"cp{config.attn_cp_rank}.{cp_size}")
    return "\0".join(parts).encode()


_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
           "fp8": torch.uint8}


def _torch_dtype(layout) -> torch.dtype:
    return _DTYPES[layout.dtype]


def _into(chunk, target, page_bytes: int):
    """A page's bytes (its layer slices, as stored) into `target`, or a new flat tensor."""
    data = chunk.contiguous().view(torch.uint8).reshape(-1)
    if target is None:
        return data.clone()
    flat = target.view(-1).view(torch.uint8)
    if flat.numel() != page_bytes:
        raise ValueError(f"objectcache: a target page of {flat.numel()} bytes, pages have "
                         f"{page_bytes}")
    flat.copy_(data)
    return target


def _first_named(error, keys) -> int:
    """The first key an error names (a damaged chunk), else 0: nothing is trusted."""
    message = str(getattr(error, "message", error))
    for i, key in enumerate(keys):
        if key.hex() in message:
            return i
    return 0

