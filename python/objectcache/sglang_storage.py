"""An SGLang HiCache storage backend (its third tier, below GPU and host memory) on ObjectCache
(docs/python.md, "SGLang").

    python -m sglang.launch_server ... --enable-hierarchical-cache \\
      --hicache-storage-backend dynamic --hicache-storage-backend-extra-config '{
        "backend_name": "objectcache", "module_path": "objectcache.sglang_storage",
        "class_name": "ObjectCacheStorage", "interface_v1": 1,
        "endpoints": ["http://127.0.0.1:9000"], "bucket": "kv",
        "access_key": "...", "secret_key": "..."}'

SGLang hands the backend pages of its host KV pool: one key a page (64 hex digits, a SHA-256
chained over the page's tokens and the pages before it), `page_size` tokens. With
`"interface_v1": 1` in the extra config SGLang calls the page calls without copies of its own
(`batch_get_v1` / `batch_set_v1` name the pages by their token slots in the pool); without it,
the generic calls with one flat tensor a page in the pool's arrangement (`get_data_page`).
Either way each page is stored as one chunk object in the canonical order of every engine's
chunks, whatever the pool's memory layout (`layer_first`, `page_first`, `page_first_direct`,
`page_head`): layer by layer, each layer's slice K then V, tokens, heads, head size (MLA: the
latents, tokens by width), every layer slice checksummed, so every byte a load returns is
checked and a page saved from one arrangement loads into any other, or into a paged cache by
one layerwise retrieval. A page's key is SHA-256 over a namespace and SGLang's key: the model,
the dtype, the page size, the layout, and the tensor- and pipeline-parallel rank unless the
model is MLA (whose ranks hold the same latents; SGLang lets only rank 0 write them). Pages of
another rank never share a key.

Loads are prefix loads, as SGLang's chained keys are: `batch_exists` is one lookup request, a
load one aggregated retrieval of the leading pages that exist; a page that does not arrive
verified, and every page after it, are not loaded (SGLang then stops its prefetch there). Saves
return once the server has the pages.
"""
from __future__ import annotations

import hashlib

import torch
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage

from . import Client, Error, layout_for_model
from .connector import first_damaged

# Keys of the extra config that are ours (the rest are SGLang's own: backend_name, ...).
_CLIENT_OPTIONS = ("access_key", "secret_key", "ca_file", "timeout", "retries",
                   "write_behind_bytes", "aggregated_streams", "failover")


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
        self.client = self.layout = self.namespace = self.pages = None
        self.failed_gets = 0

    # ---- setup -------------------------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host) -> None:
        super().register_mem_pool_host(mem_pool_host)
        self.pages = HostPages(mem_pool_host, self.config.is_mla_model)
        self.layout = self.pages.chunk_layout(self.config.model_name)
        self.namespace = page_namespace(self.config, self.layout)
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

    def batch_get_v1(self, keys, host_indices, extra_info=None) -> list[bool]:
        """The leading stored pages, verified, straight into their token slots of the pool;
        True for each page loaded (a prefix)."""
        ids = self._page_ids(keys, host_indices)
        chunks = self._load(keys)
        self.pages.scatter(chunks, ids[:len(chunks)])
        return [i < len(chunks) for i in range(len(keys))]

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        """Each page's flat tensor in the pool's arrangement (written into target_locations[i]
        where given), or None for a page that is not stored or did not arrive verified, and for
        every page after it."""
        pages = [None] * len(keys)
        chunks = self._load(keys)
        for j in range(len(chunks)):
            flat = self.pages.to_flat_page(chunks[j])
            target = None if target_locations is None else target_locations[j]
            pages[j] = _into(flat, target)
        return pages

    def get(self, key, target_location=None, target_sizes=None):
        return self.batch_get([key], None if target_location is None else [target_location])[0]

    def _load(self, keys):
        """The leading stored pages' chunks, [pages, layers, slice] (canonical), every slice
        verified; a damaged page and those after it left out."""
        self._ready()
        chunk_keys = [self.key(k) for k in keys[:self.batch_exists(keys)]]
        try:
            return self._retrieve(chunk_keys)
        except Error as e:
            # A damaged page fails the layers from its own for every page of the retrieval:
            # once more with the pages before it (none when the error names none).
            self.failed_gets += 1
            chunk_keys = chunk_keys[:first_damaged(e, chunk_keys)]
            try:
                return self._retrieve(chunk_keys)
            except Error:
                return self._retrieve([])

    def _retrieve(self, chunk_keys):
        lay = self.layout
        staging = torch.empty(lay.layers, len(chunk_keys), self.pages.slice_elements,
                              dtype=self.pages.dtype)
        if chunk_keys:
            retrieval = self.client.retrieve_layerwise(chunk_keys, lay.layers, list(staging))
            retrieval.wait()
            staging = staging[:, :retrieval.hits]
        return staging.transpose(0, 1)

    # ---- stores ------------------------------------------------------------------------------

    def batch_set_v1(self, keys, host_indices, extra_info=None) -> list[bool]:
        """Stores the pages at their token slots of the pool; True for each once the server
        holds all of them."""
        ok = self._store(keys, self.pages.gather(self._page_ids(keys, host_indices)))
        return [ok] * len(keys)

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None) -> bool:
        """Stores every page (flat tensors in the pool's arrangement); True once the server
        holds all of them."""
        self._ready()
        if values is None or len(values) != len(keys):
            raise ValueError("objectcache: batch_set needs one value a key")
        return self._store(keys, [self.pages.from_flat_page(v) for v in values])

    def set(self, key, value=None, target_location=None, target_sizes=None) -> bool:
        return self.batch_set([key], [value])

    def _store(self, keys, chunks) -> bool:
        client = self._ready()
        before = client.stats()
        for key, chunk in zip(keys, chunks):
            client.store(self.key(key), chunk.contiguous())
        client.flush()
        after = client.stats()
        return all(after[k] == before[k] for k in ("failed", "dropped"))

    def _page_ids(self, keys, host_indices):
        self._ready()
        slots = torch.as_tensor(host_indices, dtype=torch.int64).reshape(-1).cpu()
        if slots.numel() != len(keys) * self.pages.page_size:
            raise ValueError(f"objectcache: {slots.numel()} token slots for {len(keys)} pages of "
                             f"{self.pages.page_size} tokens")
        return self.pages.page_ids(slots)

    def clear(self) -> None:
        """Nothing is deleted: the cache is shared with every other engine that uses it."""

    def close(self) -> None:
        if self.client is not None:
            self.client.flush()


class HostPages:
    """The pages of an SGLang host pool (`kv_buffer` in its memory layout) against the chunks'
    canonical order: per layer K then V, each [page_size, heads, head_dim] (MLA: the latents,
    [page_size, 1, width]). The buffer is viewed, without a copy, as [pages, layers, ...] in
    that order (its token-slot dimension split into pages of page_size); a save gathers the
    pages asked for out of that view and a load scatters into it, one copy each."""

    # layout: (the dimension of token slots, or None when the buffer has a page dimension
    # first among its own, and the permutation of the buffer, slots split into (pages,
    # page_size), into [pages, layers, (2,) page_size, heads, head_dim])
    MHA = {"layer_first": (2, (2, 1, 0, 3, 4, 5)),           # (2, L, T, H, D)
           "page_first": (1, (1, 3, 0, 2, 4, 5)),            # (2, T, L, H, D)
           "page_first_direct": (None, (1, 2, 0, 3, 4, 5)),  # (2, Pn, L, P, H, D)
           "page_head": (None, (1, 4, 0, 3, 2, 5))}          # (2, Pn, H, P, L, D)
    MLA = {"layer_first": (1, (1, 0, 2, 3, 4)),              # (L, T, 1, C)
           "page_first": (0, (0, 2, 1, 3, 4)),               # (T, L, 1, C)
           "page_first_direct": (None, (0, 1, 2, 3, 4))}     # (Pn, L, P, 1, C)

    def __init__(self, pool, mla: bool):
        buffer = pool.kv_buffer
        self.arrangement = str(getattr(pool, "layout", "layer_first"))
        table = self.MLA if mla else self.MHA
        if self.arrangement not in table:
            raise ValueError(f"objectcache: an {'MLA' if mla else 'MHA'} host pool in layout "
                             f"'{self.arrangement}' is not supported (only {sorted(table)})")
        slot_dim, self.perm = table[self.arrangement]
        self.inverse = tuple(self.perm.index(i) for i in range(len(self.perm)))
        self.mla, self.dtype = mla, buffer.dtype
        self.page_size, self.layers = int(pool.page_size), int(pool.layer_num)
        shape = list(buffer.shape)
        split = slot_dim is not None
        if len(shape) != len(self.perm) - split or \
                (split and shape[slot_dim] % self.page_size != 0):
            raise ValueError(f"objectcache: a host pool of shape {tuple(shape)} is not one of "
                             f"layout '{self.arrangement}' with pages of {self.page_size}")
        if split:
            buffer = buffer.unflatten(slot_dim, (shape[slot_dim] // self.page_size,
                                                 self.page_size))
        # One flat page in the pool's arrangement (get_data_page) has this shape.
        self.page_shape = [1 if i == self.perm[0] else n for i, n in enumerate(buffer.shape)]
        self.pages = buffer.permute(self.perm)  # [pages, layers, ...], a view
        self.chunk_shape = list(self.pages.shape[2:])  # one layer of one page
        page_dim = 0 if mla else 1
        if self.pages.shape[1] != self.layers or self.chunk_shape[page_dim] != self.page_size \
                or (not mla and self.chunk_shape[0] != 2):
            raise ValueError(f"objectcache: a host pool of shape {tuple(shape)} in layout "
                             f"'{self.arrangement}' is not {self.layers} layers of pages of "
                             f"{self.page_size} tokens")
        self.slice_elements = 1
        for n in self.chunk_shape:
            self.slice_elements *= n

    def chunk_layout(self, model_name):
        name = "sglang/" + (model_name or "model")
        if self.mla:
            return layout_for_model(name, self.layers, 1, self.chunk_shape[-1], self.dtype,
                                    self.page_size, latent=True)
        _, page, heads, head_dim = self.chunk_shape
        return layout_for_model(name, self.layers, heads, head_dim, self.dtype, page)

    def page_ids(self, slots):
        """The pages whose token slots `slots` are, page_size each, whole and in order."""
        by_page = slots.reshape(-1, self.page_size)
        ids = by_page[:, 0] // self.page_size
        whole = ids[:, None] * self.page_size + torch.arange(self.page_size)
        if not torch.equal(by_page, whole):
            raise ValueError("objectcache: token slots that are not whole pages of "
                             f"{self.page_size}, in order")
        return ids

    def gather(self, ids):
        """Pages `ids` as chunks [pages, layers, slice]."""
        x = self.pages.index_select(0, ids.to(self.pages.device))
        return x.reshape(len(ids), self.layers, -1).cpu()

    def scatter(self, chunks, ids):
        """Chunks [pages, layers, slice] into pages `ids`."""
        if chunks.shape[0] == 0:
            return
        x = chunks.reshape(chunks.shape[0], self.layers, *self.chunk_shape)
        self.pages.index_copy_(0, ids.to(self.pages.device), x.to(self.pages.device, self.dtype))

    def from_flat_page(self, page):
        """One flat page in the pool's arrangement (get_data_page) as a chunk [layers, slice]."""
        data = page.detach().reshape(-1).cpu()
        if data.numel() * data.element_size() != self._page_bytes():
            raise ValueError(f"objectcache: a page of {data.numel() * data.element_size()} bytes, "
                             f"the host pool's pages have {self._page_bytes()}")
        x = data.view(torch.uint8).view(self.dtype).reshape(self.page_shape)
        return x.permute(self.perm).reshape(self.layers, -1)

    def to_flat_page(self, chunk):
        """A chunk [layers, slice] as one flat page in the pool's arrangement."""
        x = chunk.reshape(1, self.layers, *self.chunk_shape).permute(self.inverse)
        return x.contiguous().reshape(-1)

    def _page_bytes(self):
        return self.layers * self.slice_elements * self.pages.element_size()


def page_namespace(config, layout) -> bytes:
    """Everything that changes a page's bytes for the same tokens (not the pool's memory
    layout: the chunks are in canonical order)."""
    parts = ["sglang-hicache-v2", config.model_name or "", f"page{layout.tokens_per_chunk}",
             layout.to_json()]
    if not config.is_mla_model:
        parts.append(f"tp{config.tp_rank}.{config.tp_size}")
    if config.pp_size > 1:
        parts.append(f"pp{config.pp_rank}.{config.pp_size}")
    cp_size = getattr(config, "attn_cp_size", 1) or 1
    if cp_size > 1:
        parts.append(f"cp{config.attn_cp_rank}.{cp_size}")
    return "\0".join(parts).encode()


def _into(page, target):
    """A flat page into `target` (its bytes), or the page itself."""
    if target is None:
        return page.view(torch.uint8)
    flat = target.view(-1).view(torch.uint8)
    data = page.view(torch.uint8)
    if flat.numel() != data.numel():
        raise ValueError(f"objectcache: a target page of {flat.numel()} bytes, pages have "
                         f"{data.numel()}")
    flat.copy_(data)
    return target
