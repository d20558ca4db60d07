"""An engine-neutral KV connector with the shape of vLLM's KV connector v1 (docs/python.md).

vLLM splits a connector in two: the scheduler side decides how many prompt tokens the cache can
supply and tells the workers what to load and save (connector metadata); the worker side loads
and saves, layer by layer, around the model's forward pass. This class implements both roles
with exactly vLLM's call names; objects from the engine are read by duck typing:

- a request has `request_id`, `prompt_token_ids`, and optionally `lora_name` (or vLLM's
  `lora_request.lora_name`) and `cache_salt`;
- blocks are the request's KV block ids, in order (vLLM: `blocks.get_block_ids()[0]`);
- a scheduler output lists the newly scheduled requests with their blocks (`NewRequest`) and
  the requests scheduled before (`CachedRequest`: a later chunk of a long prompt, or a preempted
  request resumed with new blocks).

KV caches are CPU tensors of [num_blocks, 2, block_size, kv_heads, head_dim] (the host path), or
CUDA tensors in any layout `cache_order` recognises (the device path, docs/gpu.md). Every hook
catches every failure: a load that fails is reported as blocks to recompute
(`get_block_ids_with_load_errors`), a save that fails is dropped; the engine never sees an
exception from a hook.

The reference engine (objectcache.engine) drives its prefix caching through these calls only;
objectcache.vllm_connector registers the same class with vLLM.

Keys name everything that changes the KV: model, layout, tenant salt, LoRA adapter and the
request's cache salt. A prefix always leaves at least one token to compute, since the engine
needs the last token's logits.
"""
from __future__ import annotations

import enum
import hashlib
import re
import time
from dataclasses import dataclass, field

from . import Client, Error, Layout, chunk_keys


class Role(enum.Enum):
    SCHEDULER = 0
    WORKER = 1


@dataclass
class ConnectorConfig:
    endpoints: list[str]
    bucket: str
    layout: Layout
    access_key: str | None = None
    secret_key: str | None = None
    ca_file: str | None = None
    tenant: str | None = None          # tenant salt folded into every key
    mode: str = "S3Agg-LW"             # retrieval mode
    dram_tier_bytes: int = 0
    write_behind_bytes: int = 256 << 20
    timeout: float = 60.0
    saves: bool = True                 # False: this worker only loads (an MLA rank but the first)
    device: object = None              # an objectcache.Device for CUDA caches (None: their GPU)
    staging_layers: int = 4            # pinned staging of a device load or save, in layers
    aggregated_streams: int = 0        # connections a retrieval uses (0: one per 4 cores, 1-8)
    failover: bool = False             # endpoints share one store: retry at the next one
    # The layers this connector serves, in the layout's order (a KV cache group's); None: every
    # registered layer, indexed by the number in its name.
    layer_names: list[str] | None = None
    null_block: int | None = None      # a block id that holds nothing (vLLM's 0): never used

    @property
    def tokens_per_chunk(self) -> int:
        return self.layout.tokens_per_chunk

    def client(self) -> Client:
        return Client(self.endpoints, self.bucket, self.layout, access_key=self.access_key,
                      secret_key=self.secret_key, ca_file=self.ca_file,
                      dram_tier_bytes=self.dram_tier_bytes,
                      write_behind_bytes=self.write_behind_bytes, timeout=self.timeout,
                      aggregated_streams=self.aggregated_streams, failover=self.failover)


@dataclass
class NewRequest:
    request: object              # has request_id
    block_ids: list[int]         # all of the request's blocks, in order (block size = chunk)


@dataclass
class CachedRequest:
    """A request scheduled in an earlier step (vLLM's scheduled_cached_reqs)."""
    request_id: str
    new_block_ids: list[int]     # appended to its blocks; for a resumed request, all of them
    num_computed_tokens: int     # tokens the engine has for it before this step
    resumed: bool = False        # preempted and scheduled again: its prefix is loaded again


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: list[NewRequest]
    # Prompt tokens each request computes in this step (vLLM's num_scheduled_tokens); None: the
    # whole rest of the prompt. Only chunks computed by the end of the step are saved.
    num_scheduled_tokens: dict[str, int] | None = None
    scheduled_cached_reqs: list[CachedRequest] = field(default_factory=list)


@dataclass
class RequestMeta:
    """What a worker does for one request in this step."""
    request_id: str
    first_chunk: int             # chunks before it are in the engine's own prefix cache
    load_keys: list[bytes]       # chunks first_chunk.. of the prompt, loaded into load_blocks
    load_blocks: list[int]
    save_keys: list[bytes]       # the chunks this step completes, saved from save_blocks
    save_blocks: list[int]
    save_first: int = 0          # the first chunk of save_keys
    # The prompt tokens through the last chunk named, its adapter and cache salt: a worker
    # whose key namespace is its own (a tensor-parallel rank) derives its keys from them.
    scope: tuple | None = None


@dataclass
class ConnectorMetadata:
    requests: list[RequestMeta] = field(default_factory=list)

    @property
    def has_loads(self) -> bool:
        return any(r.load_keys for r in self.requests)


@dataclass
class _Scheduled:
    """The scheduler side's state of one request, from its allocation to its end."""
    keys: list[bytes]
    prompt_tokens: int
    local: int                   # tokens the engine had itself when the load was decided
    external: int                # tokens loaded from ObjectCache
    load_pending: bool           # the load is still to be sent to the workers
    done: int                    # chunks the cache has or will have: local, loaded or saved
    scope: tuple                 # (prompt tokens, adapter, cache salt)
    blocks: list[int] = field(default_factory=list)


def _adapter(request) -> str | None:
    name = getattr(request, "lora_name", None)
    if name is None and getattr(request, "lora_request", None) is not None:
        name = request.lora_request.lora_name
    return name


def _salt(request) -> str | None:
    """The request's cache salt, with the identifiers of its multimodal inputs (vLLM's
    mm_features): two images behind the same placeholder tokens never share KV. (Conservative:
    the tokens before the first image are not shared with text-only prompts either.)"""
    salt = getattr(request, "cache_salt", None)
    features = getattr(request, "mm_features", None) or ()
    ids = [str(getattr(f, "identifier", f)) for f in features]
    if not ids:
        return salt
    digest = hashlib.sha256("\x00".join(ids).encode()).hexdigest()
    return (salt or "") + "\x00mm:" + digest


def _is_cuda(tensor) -> bool:
    device = getattr(tensor, "device", None)
    return getattr(device, "type", "cpu") == "cuda"


def cache_order(shape, layout: Layout) -> str:
    """The dimensions of one layer's paged cache, named for the device path (docs/gpu.md), from
    its logical shape: FLASH_ATTN's (2, B, N, H, D), FlashInfer's and Triton's (B, 2, N, H, D),
    K and V packed per token and head (B, H, N, 2D), MLA's (B, N, C) and (B, 1, N, C)."""
    shape = tuple(shape)
    if layout.latent:
        if len(shape) == 3:
            return "BNC"
        if len(shape) == 4 and shape[1] == 1:
            return "B1NC"
    elif len(shape) == 5 and shape[0] == 2:
        return "2BNHD"
    elif len(shape) == 5 and shape[1] == 2:
        return "B2NHD"
    elif len(shape) == 4 and shape[3] == 2 * layout.head_dim and shape[1] == layout.kv_heads:
        return "BHNX"
    raise ValueError(f"a KV cache of shape {shape} is not a layout ObjectCache knows for "
                     f"{layout!r} (docs/gpu.md lists them)")


_LAYER_NUMBER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def first_damaged(error: Exception, keys) -> int:
    """The index of the first of `keys` a failed retrieval's error names (a damaged chunk);
    0 when it names none (a server gone, a layer frame damaged in flight, a bad tensor): then
    nothing of the retrieval is trusted."""
    named = set(re.findall(r"\b[0-9a-f]{32}\b", str(getattr(error, "message", error))))
    return next((i for i, key in enumerate(keys) if key.hex() in named), 0)


class ObjectCacheConnector:
    def __init__(self, config: ConnectorConfig, role: Role):
        self.config = config
        self.role = role
        self.client = config.client()
        g = config.tokens_per_chunk
        self._g = g
        # scheduler side
        self._keys: dict[str, list[bytes]] = {}
        self._matched: dict[str, tuple] = {}      # (args, result, num_computed_tokens)
        self._sched: dict[str, _Scheduled] = {}
        self.lookup_errors = 0
        # worker side
        self._kv_caches: list = []
        self._layer_index: dict[str, int] = {}
        self._order: str | None = None            # CUDA caches: their dimensions' names
        self._meta = ConnectorMetadata()
        self._loads: dict[str, tuple] = {}
        self._loads_started = False
        self._saves: dict[str, object] = {}
        self._load_errors: dict[str, tuple[int, list[int]]] = {}  # first bad chunk, blocks
        self.save_errors = 0
        self.save_seconds = 0.0  # time spent in save_kv_layer: the save path's forward cost

    def close(self) -> None:
        self._loads.clear()
        self._saves.clear()
        self.client = None

    def shutdown(self) -> None:
        """Flushes what is being saved, then lets go of the client (vLLM's worker exit)."""
        try:
            self.flush()
        except Exception:  # noqa: BLE001: a cache that cannot flush loses only cached KV
            pass
        self.close()

    def keys_for(self, request) -> list[bytes]:
        """No keys for a prompt given as embeddings (no token ids)."""
        if request.prompt_token_ids is None:
            return []
        return chunk_keys(request.prompt_token_ids, self.config.layout, tenant=self.config.tenant,
                          adapter=_adapter(request), cache_salt=_salt(request))

    def _keys_of(self, request) -> list[bytes]:
        rid = request.request_id
        if rid not in self._keys:
            try:
                self._keys[rid] = self.keys_for(request)
            except Exception:  # noqa: BLE001: a request the cache cannot name is computed
                self.lookup_errors += 1
                self._keys[rid] = []
        return self._keys[rid]

    # ---- scheduler side ----------------------------------------------------------------------

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int,
                                   limit: int | None = None) -> tuple[int, bool]:
        """Prompt tokens beyond num_computed_tokens whose KV the cache has, and whether they load
        asynchronously (never: loads are layerwise, inside the forward pass). `limit` caps the
        match in chunks (after a failed load: recompute from the first bad chunk). Asked again
        with the same arguments, it answers from the first lookup."""
        rid = request.request_id
        args = (num_computed_tokens, limit)
        if rid in self._matched and self._matched[rid][0] == args:
            return self._matched[rid][1]
        keys = self._keys_of(request)
        # At least the last prompt token is computed: the engine needs its logits.
        usable = min(len(keys), (len(request.prompt_token_ids or ()) - 1) // self._g)
        if limit is not None:
            usable = min(usable, limit)
        hits = 0
        if usable > 0:
            try:
                hits = self.client.lookup(keys[:usable])
            except Exception:  # noqa: BLE001: the cache is unreachable: compute everything
                self.lookup_errors += 1
        result = (max(0, hits * self._g - num_computed_tokens), False)
        self._matched[rid] = (args, result, num_computed_tokens)
        return result

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int):
        """Records what the scheduler accepted; the blocks come with the scheduled request."""
        rid = request.request_id
        local = self._matched[rid][2] if rid in self._matched else 0
        g = self._g
        tokens = list(request.prompt_token_ids or ())
        self._sched[rid] = _Scheduled(self._keys_of(request), len(tokens), local,
                                      num_external_tokens, num_external_tokens > 0,
                                      (local + num_external_tokens) // g,
                                      (tokens, _adapter(request), _salt(request)))

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> ConnectorMetadata:
        meta = ConnectorMetadata()
        scheduled = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            rid = new.request.request_id
            st = self._sched.get(rid)
            if st is None:
                continue
            st.blocks = list(new.block_ids)
            self._step(meta, rid, st, st.local + st.external, scheduled)
        for cached in scheduler_output.scheduled_cached_reqs:
            st = self._sched.get(cached.request_id)
            if st is None:
                continue
            if cached.resumed:
                st.blocks = list(cached.new_block_ids)
            else:
                st.blocks.extend(cached.new_block_ids)
            before = cached.num_computed_tokens
            if st.load_pending:  # resumed: what it loads counts as computed
                before = max(before, st.local + st.external)
            self._step(meta, cached.request_id, st, before, scheduled)
        return meta

    def _step(self, meta, rid, st: _Scheduled, before: int, scheduled) -> None:
        """One step of one request: its pending load, and the chunks the step completes."""
        g, keys = self._g, st.keys
        first = st.local // g
        load_keys, load_blocks = [], []
        if st.load_pending:
            n = st.external // g
            load_keys, load_blocks = keys[first:first + n], st.blocks[first:first + n]
            st.load_pending = False
        step = scheduled.get(rid, 0) if scheduled is not None else st.prompt_tokens - before
        # Save only chunks whose every token is computed by the end of this step (a chunk saved
        # before its KV exists would be wrong KV under a right key).
        last = min(len(keys), len(st.blocks), (before + step) // g)
        start = max(st.done, first + len(load_keys))
        st.done = max(st.done, last)
        save_keys, save_blocks = keys[start:last], st.blocks[start:last]
        end = max(first + len(load_keys), last)
        # A group whose leading blocks hold nothing (vLLM's null block: chunks outside a
        # sliding window) loads and saves only from its first real block, and never past a
        # null one.
        skip, load_keys, load_blocks = self._real_blocks(load_keys, load_blocks)
        first += skip
        skip, save_keys, save_blocks = self._real_blocks(save_keys, save_blocks)
        start += skip
        if load_keys or save_keys:
            tokens, adapter, salt = st.scope
            meta.requests.append(RequestMeta(rid, first, load_keys, load_blocks, save_keys,
                                             save_blocks, start, (tokens[:end * g], adapter, salt)))

    def _real_blocks(self, keys, blocks):
        """(leading null blocks skipped, the keys and blocks from the first real block to the
        next null one)."""
        null = self.config.null_block
        if null is None:
            return 0, keys, blocks
        skip = 0
        while skip < len(blocks) and blocks[skip] == null:
            skip += 1
        end = skip
        while end < len(blocks) and blocks[end] != null:
            end += 1
        return skip, keys[skip:end], blocks[skip:end]

    def request_finished(self, request, block_ids: list[int]) -> tuple[bool, dict | None]:
        """Saves copy what they need within their step, so the blocks can be freed now."""
        for d in (self._keys, self._matched, self._sched):
            d.pop(request.request_id, None)
        return False, None

    # ---- worker side -------------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: dict) -> None:
        """Layer name -> the layer's paged cache. A layer's index comes from its name
        (`...layers.N....`), else from the order; names beyond the layout's layers (a draft
        model's) are not served. CPU caches: [num_blocks, 2, block_size, kv_heads, head_dim];
        CUDA caches: any layout `cache_order` knows."""
        layers = self.config.layout.layers
        numbered = {}
        for i, name in enumerate(kv_caches):
            m = _LAYER_NUMBER.search(name)
            numbered[name] = int(m.group(1)) if m else None
        if self.config.layer_names is not None:
            numbered = {name: i for i, name in enumerate(self.config.layer_names)
                        if name in kv_caches}
        elif any(v is None for v in numbered.values()):
            numbered = {name: i for i, name in enumerate(kv_caches)}
        served = {name: i for name, i in numbered.items() if i < layers}
        if sorted(served.values()) != list(range(layers)):
            raise ValueError(f"{len(served)} KV caches for a layout of {layers} layers")
        self._layer_index = served
        self._kv_caches = [None] * layers
        for name, i in served.items():
            self._kv_caches[i] = kv_caches[name]
        first, lay = self._kv_caches[0], self.config.layout
        if _is_cuda(first):
            self._order = cache_order(first.shape, lay)
            return
        self._order = None
        want = (2, lay.tokens_per_chunk, lay.kv_heads, lay.head_dim)
        if lay.latent or first.dim() != 5 or tuple(first.shape[1:]) != want:
            raise ValueError(f"a CPU KV cache of shape {tuple(first.shape)}; CPU caches are "
                             f"[num_blocks, 2, block_size = {lay.tokens_per_chunk}, kv_heads, "
                             "head_dim] (CUDA caches may have any layout docs/gpu.md lists)")

    def bind_connector_metadata(self, meta: ConnectorMetadata) -> None:
        """The step's plan; its saves open here, so save_kv_layer finds them whenever the engine
        starts its loads (vLLM starts them after the forward in steps without any)."""
        self._meta = meta
        self._loads_started = False
        for r in meta.requests:
            self._own_keys(r)
        for r in meta.requests:
            if not r.save_keys or not self.config.saves:
                continue
            try:
                if self._order is not None:
                    save = self.client.save_from_device(
                        r.save_keys, self._kv_caches, r.save_blocks, order=self._order,
                        device=self.config.device, staging_layers=self.config.staging_layers)
                else:
                    save = self.client.start_save(r.save_keys)
                self._saves[r.request_id] = (save, r.save_blocks)
            except Exception:  # noqa: BLE001: not saving costs a later recompute, nothing else
                self.save_errors += 1

    def _own_keys(self, r: RequestMeta) -> None:
        """The request's keys in this worker's namespace (its layout's name: a tensor-parallel
        rank's is its own), from the tokens the scheduler sent."""
        if r.scope is None:
            return
        tokens, adapter, salt = r.scope
        keys = chunk_keys(tokens, self.config.layout, tenant=self.config.tenant, adapter=adapter,
                          cache_salt=salt)
        r.load_keys = keys[r.first_chunk:r.first_chunk + len(r.load_keys)]
        r.save_keys = keys[r.save_first:r.save_first + len(r.save_keys)]

    def clear_connector_metadata(self) -> None:
        self._meta = ConnectorMetadata()
        self._loads.clear()
        self._loads_started = False

    def start_load_kv(self, forward_context=None, **kwargs) -> None:
        """Starts each request's layerwise retrieval into its blocks; returns at once."""
        self._start_loads()

    def _start_loads(self) -> None:
        if self._loads_started:
            return
        self._loads_started = True
        for r in self._meta.requests:
            if not r.load_keys:
                continue
            try:
                if self._order is not None:
                    retrieval = self.client.retrieve_to_device(
                        r.load_keys, len(self._kv_caches), self._kv_caches, r.load_blocks,
                        order=self._order, mode=self.config.mode, device=self.config.device,
                        staging_layers=self.config.staging_layers)
                else:
                    retrieval = self.client.retrieve_layerwise(
                        r.load_keys, len(self._kv_caches), self._kv_caches,
                        mode=self.config.mode, block_table=r.load_blocks)
                hits = retrieval.hits
            except Exception as e:  # noqa: BLE001: whatever failed, the prefix is recomputed
                self._fail(r, e)
                continue
            if hits < len(r.load_keys):  # a chunk went missing since the lookup
                self._load_error(r, hits)
                continue
            self._loads[r.request_id] = (retrieval, r)

    def wait_for_layer_load(self, layer_name: str) -> None:
        """The layer's KV is in its blocks (on a GPU: the current stream waits for its copy)."""
        layer = self._layer_index.get(layer_name)
        if layer is None:
            return  # not a layer this connector serves
        self._start_loads()  # an engine that runs the forward first still gets its loads
        device = self._order is not None and not getattr(self.config.device, "emulated", False)
        for rid, (retrieval, r) in list(self._loads.items()):
            try:
                if device:
                    retrieval.stream_wait_for_layer(layer)
                else:
                    retrieval.wait_for_layer(layer)
            except Exception as e:  # noqa: BLE001
                self._fail(r, e)
                del self._loads[rid]

    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs) -> None:
        layer = self._layer_index.get(layer_name)
        if layer is None:
            return
        start = time.perf_counter()
        for rid, (save, blocks) in list(self._saves.items()):
            try:
                if self._order is not None:
                    save.save_layer(layer)
                else:
                    save.save_layer(layer, kv_layer, block_ids=blocks)
            except Exception:  # noqa: BLE001: the save is dropped; its chunks are recomputed
                self.save_errors += 1
                del self._saves[rid]
        self.save_seconds += time.perf_counter() - start

    def wait_for_save(self) -> None:
        """Host caches: each layer was copied when handed over. Device caches: waits until
        every layer is off the GPU, so the step's blocks may be reused. The chunks are then
        sealed and stored by the client's write-behind thread."""
        for save, _ in self._saves.values():
            if self._order is not None:
                try:
                    save.wait()
                except Exception:  # noqa: BLE001
                    self.save_errors += 1
        self._saves.clear()

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None,
                                                                set[str] | None]:
        return None, None  # no transfer outlives its step

    # Load failures (vLLM reports them as blocks with load errors; the scheduler then
    # recomputes from there).
    def has_load_error(self, request_id: str) -> bool:
        return request_id in self._load_errors

    def take_load_error(self, request_id: str) -> int:
        """The first chunk of the request's prompt that did not load verified: a new load may
        fetch the chunks before it again, the rest is recomputed."""
        return self._load_errors.pop(request_id)[0]

    def get_block_ids_with_load_errors(self) -> set[int]:
        """Blocks whose KV did not load verified, for every request (vLLM's name), reported
        once; each is to be recomputed, never read: every block of a load that failed (its
        layers from the failure on are missing for every chunk), the blocks from a chunk that
        went missing on."""
        blocks = {b for _, bad in self._load_errors.values() for b in bad}
        self._load_errors.clear()
        return blocks

    def _load_error(self, r: RequestMeta, first_bad: int) -> None:
        self._load_errors[r.request_id] = (r.first_chunk + first_bad, r.load_blocks[first_bad:])

    def _fail(self, r: RequestMeta, error: Exception) -> None:
        # A retrieval that failed stops at a layer for every chunk (a damaged slice ends the
        # layer-major stream there): no block of it holds every layer, so every block is
        # reported. A retry may still fetch again the chunks before the first damaged one.
        self._load_errors[r.request_id] = (r.first_chunk + first_damaged(error, r.load_keys),
                                           list(r.load_blocks))

    def flush(self) -> None:
        """Blocks until every saved chunk is stored (tests, and before a process exits)."""
        self.client.flush()


@dataclass
class GroupedMetadata:
    groups: list[ConnectorMetadata]

    @property
    def has_loads(self) -> bool:
        return any(m.has_loads for m in self.groups)


class GroupedConnector:
    """Several KV cache groups (vLLM's hybrid allocator: full-attention and sliding-window
    layers, each group with its own block table): one ObjectCacheConnector a group, each with
    the group's layers (`ConnectorConfig.layer_names`), its own layout and so its own keys. A
    prefix is matched only as far as every group has it. Block ids come one list a group
    (NewRequest.block_ids, CachedRequest.new_block_ids); the calls are ObjectCacheConnector's."""

    def __init__(self, configs: list[ConnectorConfig], role: Role):
        if any(c.layer_names is None for c in configs):
            raise ValueError("every KV cache group names its layers")
        self.groups = [ObjectCacheConnector(c, role) for c in configs]
        self._group_of = {name: g for g, c in zip(self.groups, configs) for name in c.layer_names}

    def close(self) -> None:
        for g in self.groups:
            g.close()

    def shutdown(self) -> None:
        for g in self.groups:
            g.shutdown()

    def flush(self) -> None:
        for g in self.groups:
            g.flush()

    # ---- scheduler side ----
    def get_num_new_matched_tokens(self, request, num_computed_tokens: int,
                                   limit: int | None = None) -> tuple[int, bool]:
        matched = [g.get_num_new_matched_tokens(request, num_computed_tokens, limit)[0]
                   for g in self.groups]
        return min(matched), False

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int):
        for g in self.groups:
            g.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> GroupedMetadata:
        metas = []
        for i, g in enumerate(self.groups):
            out = SchedulerOutput(
                [NewRequest(n.request, list(n.block_ids[i]))
                 for n in scheduler_output.scheduled_new_reqs],
                scheduler_output.num_scheduled_tokens,
                [CachedRequest(c.request_id, list(c.new_block_ids[i]), c.num_computed_tokens,
                               c.resumed) for c in scheduler_output.scheduled_cached_reqs])
            metas.append(g.build_connector_meta(out))
        return GroupedMetadata(metas)

    def request_finished(self, request, block_ids) -> tuple[bool, dict | None]:
        for g in self.groups:
            g.request_finished(request, block_ids)
        return False, None

    # ---- worker side ----
    def register_kv_caches(self, kv_caches: dict) -> None:
        for g in self.groups:
            g.register_kv_caches({n: kv_caches[n] for n in g.config.layer_names if n in kv_caches})

    def bind_connector_metadata(self, meta: GroupedMetadata) -> None:
        for g, m in zip(self.groups, meta.groups):
            g.bind_connector_metadata(m)

    def clear_connector_metadata(self) -> None:
        for g in self.groups:
            g.clear_connector_metadata()

    def start_load_kv(self, forward_context=None, **kwargs) -> None:
        for g in self.groups:
            g.start_load_kv(forward_context, **kwargs)

    def wait_for_layer_load(self, layer_name: str) -> None:
        if layer_name in self._group_of:
            self._group_of[layer_name].wait_for_layer_load(layer_name)

    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs) -> None:
        if layer_name in self._group_of:
            self._group_of[layer_name].save_kv_layer(layer_name, kv_layer, attn_metadata,
                                                     **kwargs)

    def wait_for_save(self) -> None:
        for g in self.groups:
            g.wait_for_save()

    def get_finished(self, finished_req_ids: set[str]):
        return None, None

    def has_load_error(self, request_id: str) -> bool:
        return any(g.has_load_error(request_id) for g in self.groups)

    def take_load_error(self, request_id: str) -> int:
        """The first chunk that did not load verified in any group (recompute from there)."""
        return min(g.take_load_error(request_id) for g in self.groups
                   if g.has_load_error(request_id))

    def get_block_ids_with_load_errors(self) -> set[int]:
        """Block ids are unique across groups (vLLM's groups share one block pool)."""
        return set().union(*(g.get_block_ids_with_load_errors() for g in self.groups))
