"""An engine-neutral KV connector with the shape of vLLM's KV connector v1 (docs/python.md).

vLLM splits a connector in two: the scheduler side decides how many prompt tokens the cache can
supply and tells the workers what to load and save (connector metadata); the worker side loads
and saves, layer by layer, around the model's forward pass. This class implements both roles
with exactly vLLM's call names; objects from the engine are read by duck typing:

- a request has `request_id`, `prompt_token_ids`, and optionally `lora_name` (or vLLM's
  `lora_request.lora_name`) and `cache_salt`;
- blocks are the request's KV block ids, in order (vLLM: `blocks.get_block_ids()[0]`);
- a scheduler output lists the newly scheduled requests with their blocks (`NewRequest`).

The reference engine (objectcache.engine) drives its prefix caching through these calls only;
objectcache.vllm_connector registers the same class with vLLM.

Keys name everything that changes the KV: model, layout, tenant salt, LoRA adapter and the
request's cache salt. A prefix always leaves at least one token to compute, since the engine
needs the last token's logits.
"""
from __future__ import annotations

import enum
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

    @property
    def tokens_per_chunk(self) -> int:
        return self.layout.tokens_per_chunk

    def client(self) -> Client:
        return Client(self.endpoints, self.bucket, self.layout, access_key=self.access_key,
                      secret_key=self.secret_key, ca_file=self.ca_file,
                      dram_tier_bytes=self.dram_tier_bytes,
                      write_behind_bytes=self.write_behind_bytes, timeout=self.timeout)


@dataclass
class NewRequest:
    request: object              # has request_id
    block_ids: list[int]         # all of the request's blocks, in order (block size = chunk)


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: list[NewRequest]
    # Prompt tokens each request computes in this step (vLLM's num_scheduled_tokens); None: the
    # whole rest of the prompt. Only chunks computed by the end of the step are saved.
    num_scheduled_tokens: dict[str, int] | None = None


@dataclass
class RequestMeta:
    """What a worker does for one request in this step."""
    request_id: str
    first_chunk: int             # chunks before it are in the engine's own prefix cache
    load_keys: list[bytes]       # chunks first_chunk.. of the prompt, loaded into load_blocks
    load_blocks: list[int]
    save_keys: list[bytes]       # the chunks this step computes, saved from save_blocks
    save_blocks: list[int]


@dataclass
class ConnectorMetadata:
    requests: list[RequestMeta] = field(default_factory=list)


def _adapter(request) -> str | None:
    name = getattr(request, "lora_name", None)
    if name is None and getattr(request, "lora_request", None) is not None:
        name = request.lora_request.lora_name
    return name


class ObjectCacheConnector:
    def __init__(self, config: ConnectorConfig, role: Role):
        self.config = config
        self.role = role
        self.client = config.client()
        g = config.tokens_per_chunk
        self._g = g
        # scheduler side
        self._keys: dict[str, list[bytes]] = {}
        self._computed: dict[str, int] = {}        # tokens the engine had before the lookup
        self._pending: dict[str, tuple[int, int]] = {}  # (local tokens, external tokens)
        self.lookup_errors = 0
        # worker side
        self._kv_caches: list = []
        self._layer_index: dict[str, int] = {}
        self._meta = ConnectorMetadata()
        self._loads: dict[str, object] = {}
        self._saves: dict[str, tuple[object, list[int]]] = {}
        self._load_errors: dict[str, tuple[int, list[int]]] = {}  # first bad chunk, blocks
        self.save_seconds = 0.0  # time spent in save_kv_layer: the save path's forward cost

    def close(self) -> None:
        self._loads.clear()
        self._saves.clear()
        self.client = None

    def keys_for(self, request) -> list[bytes]:
        return chunk_keys(request.prompt_token_ids, self.config.layout, tenant=self.config.tenant,
                          adapter=_adapter(request), cache_salt=getattr(request, "cache_salt", None))

    # ---- scheduler side ----------------------------------------------------------------------

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int,
                                   limit: int | None = None) -> tuple[int, bool]:
        """Prompt tokens beyond num_computed_tokens whose KV the cache has, and whether they load
        asynchronously (never: loads are layerwise, inside the forward pass). `limit` caps the
        match in chunks (after a failed load: recompute from the first bad chunk)."""
        keys = self.keys_for(request)
        self._keys[request.request_id] = keys
        self._computed[request.request_id] = num_computed_tokens
        # At least the last prompt token is computed: the engine needs its logits.
        usable = min(len(keys), (len(request.prompt_token_ids) - 1) // self._g)
        if limit is not None:
            usable = min(usable, limit)
        hits = 0
        if usable > 0:
            try:
                hits = self.client.lookup(keys[:usable])
            except Error:
                self.lookup_errors += 1  # the cache is unreachable: compute everything
        return max(0, hits * self._g - num_computed_tokens), False

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int):
        """Records what the scheduler accepted; the blocks come with the scheduled request."""
        rid = request.request_id
        if rid not in self._keys:
            self._keys[rid] = self.keys_for(request)
        self._pending[rid] = (self._computed.get(rid, 0), num_external_tokens)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> ConnectorMetadata:
        meta = ConnectorMetadata()
        scheduled = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            rid = new.request.request_id
            if rid not in self._pending:
                continue
            local, external = self._pending.pop(rid)
            keys, blocks, g = self._keys[rid], list(new.block_ids), self._g
            first, loaded = local // g, external // g
            computed = local + external
            done = len(keys) * g if scheduled is None else computed + scheduled.get(rid, 0)
            # Save only chunks whose every token is computed by the end of this step (a chunk
            # saved before its KV exists would be wrong KV under a right key).
            last = min(len(keys), len(blocks), done // g)
            start = first + loaded
            meta.requests.append(RequestMeta(
                rid, first, keys[first:start], blocks[first:start], keys[start:last],
                blocks[start:last]))
        return meta

    def request_finished(self, request, block_ids: list[int]) -> tuple[bool, dict | None]:
        """Saves copy what they need during the forward pass, so the blocks can be freed now."""
        for d in (self._keys, self._computed, self._pending):
            d.pop(request.request_id, None)
        return False, None

    # ---- worker side -------------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: dict) -> None:
        """Layer name -> the layer's paged cache [num_blocks, 2, block_size, kv_heads, head_dim],
        in model order."""
        self._kv_caches = list(kv_caches.values())
        self._layer_index = {name: i for i, name in enumerate(kv_caches)}
        if len(self._kv_caches) != self.config.layout.layers:
            raise ValueError(f"{len(self._kv_caches)} KV caches for a layout of "
                             f"{self.config.layout.layers} layers")

    def bind_connector_metadata(self, meta: ConnectorMetadata) -> None:
        self._meta = meta

    def clear_connector_metadata(self) -> None:
        self._meta = ConnectorMetadata()
        self._loads.clear()

    def start_load_kv(self, forward_context, **kwargs) -> None:
        """Starts each request's layerwise retrieval into its blocks and each save; returns at
        once."""
        for r in self._meta.requests:
            if r.save_keys:
                save = self.client.start_save(r.save_keys)
                self._saves[r.request_id] = (save, r.save_blocks)
            if not r.load_keys:
                continue
            try:
                retrieval = self.client.retrieve_layerwise(
                    r.load_keys, len(self._kv_caches), self._kv_caches, mode=self.config.mode,
                    block_table=r.load_blocks)
                hits = retrieval.hits
            except Error as e:
                self._fail(r, e)
                continue
            if hits < len(r.load_keys):  # a chunk went missing since the lookup
                self._load_error(r, hits)
                continue
            self._loads[r.request_id] = (retrieval, r)

    def wait_for_layer_load(self, layer_name: str) -> None:
        layer = self._layer_index[layer_name]
        for rid, (retrieval, r) in list(self._loads.items()):
            try:
                retrieval.wait_for_layer(layer)
            except Error as e:
                self._fail(r, e)
                del self._loads[rid]

    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs) -> None:
        start = time.perf_counter()
        layer = self._layer_index[layer_name]
        for save, blocks in self._saves.values():
            save.save_layer(layer, kv_layer, block_ids=blocks)
        self.save_seconds += time.perf_counter() - start

    def wait_for_save(self) -> None:
        """Each layer was copied when handed over: nothing to wait for; the chunks are sealed and
        stored by the client's write-behind thread."""
        self._saves.clear()

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None,
                                                                set[str] | None]:
        return None, None  # no transfer outlives its forward pass

    # Load failures (vLLM reports them as blocks with load errors; the scheduler then
    # recomputes from there).
    def has_load_error(self, request_id: str) -> bool:
        return request_id in self._load_errors

    def take_load_error(self, request_id: str) -> int:
        """The first chunk of the request's prompt that did not load verified (recompute from
        there)."""
        return self._load_errors.pop(request_id)[0]

    def get_block_ids_with_load_errors(self) -> set[int]:
        """Blocks whose KV did not load verified, for every request (vLLM's name), reported
        once; each is to be recomputed, never read."""
        blocks = {b for _, bad in self._load_errors.values() for b in bad}
        self._load_errors.clear()
        return blocks

    def _load_error(self, r: RequestMeta, first_bad: int) -> None:
        self._load_errors[r.request_id] = (r.first_chunk + first_bad, r.load_blocks[first_bad:])

    def _fail(self, r: RequestMeta, error: Error) -> None:
        # A damaged chunk is named in the error; everything from it on is recomputed. Otherwise
        # (a server gone, a layer frame damaged in flight) the whole prefix is.
        first_bad = 0
        named = set(re.findall(r"\b[0-9a-f]{32}\b", error.message))
        for i, key in enumerate(r.load_keys):
            if key.hex() in named:
                first_bad = i
                break
        self._load_error(r, first_bad)

    def flush(self) -> None:
        """Blocks until every saved chunk is stored (tests, and before a process exits)."""
        self.client.flush()
