"""ObjectCache as a vLLM v1 KV connector: a thin adapter over objectcache.connector.

    vllm serve MODEL --block-size 16 --kv-transfer-config '{
        "kv_connector": "ObjectCacheVllmConnector",
        "kv_connector_module_path": "objectcache.vllm_connector",
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"endpoints": ["http://127.0.0.1:9000"], "bucket": "kv",
                                      "access_key": "...", "secret_key": "..."}}'

Everything the connector does is ObjectCacheConnector's, which the reference engine
(objectcache.engine) drives and CI tests. This module translates vLLM's objects to the current
connector contract (docs/python.md): the three-argument constructor and the geometry of
`kv_cache_config`, the role, new and cached (resumed, later-chunk) requests, the metadata class,
`has_sync_kv_loads` for steps that load (their loads run inside the forward, layer by layer),
several KV cache groups (SupportsHMA: one connector a group, GroupedConnector), and the
class-level answers vLLM asks at start-up. KV caches are read in whatever layout vLLM
allocates (FLASH_ATTN, FlashInfer/Triton, K and V packed, MLA; any memory order): the device path
addresses blocks by the tensors' strides. vLLM cannot be installed on the machines this project
is built on, so this adapter runs in CI against a stand-in that follows vLLM's current source,
not inside vLLM (docs/python.md says what was and was not run).
"""
from __future__ import annotations

from types import SimpleNamespace

from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                               KVConnectorMetadata,
                                                               KVConnectorRole)

try:  # models with several KV cache groups (the hybrid allocator) need it
    from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA
except ImportError:  # a vLLM from before it: one group
    class SupportsHMA:  # noqa: D101
        pass

from . import connector as kvc
from . import layout_for_model

# vLLM's cache dtype strings and torch dtype names, as layout dtypes.
_DTYPES = {"auto": None, "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32",
           "float": "fp32", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "fp8_inc": "fp8",
           "uint8": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}


class ObjectCacheVllmMetadata(KVConnectorMetadata):
    def __init__(self, meta: kvc.ConnectorMetadata):
        self.meta = meta


def _block_ids(block_ids, groups: int):
    """vLLM's block ids, one list a KV cache group: the one list for one group, else the tuple
    of them (GroupedConnector)."""
    if block_ids is None:
        block_ids = ()
    if not block_ids or not isinstance(block_ids[0], (list, tuple)):
        block_ids = (list(block_ids),)
    if len(block_ids) != groups:
        raise ValueError(f"block ids for {len(block_ids)} KV cache groups, the connector was "
                         f"built for {groups}")
    return list(block_ids[0]) if groups == 1 else tuple(list(b) for b in block_ids)


def _dtype_name(dtype) -> str:
    text = str(dtype).removeprefix("torch.")
    if text not in _DTYPES or _DTYPES[text] is None:
        raise ValueError(f"no KV dtype for {dtype!r}")
    return _DTYPES[text]


def configs_from_vllm(vllm_config, kv_cache_config=None) -> list[kvc.ConnectorConfig]:
    """One connector config a KV cache group vLLM allocated (the model config's geometry when
    none is given)."""
    extra = dict(vllm_config.kv_transfer_config.kv_connector_extra_config or {})
    model, parallel, cache = (vllm_config.model_config, vllm_config.parallel_config,
                              vllm_config.cache_config)
    dtype = model.dtype if cache.cache_dtype == "auto" else cache.cache_dtype
    geometry = [(model.get_num_layers(parallel), None, model.get_num_kv_heads(parallel),
                 model.get_head_size(), cache.block_size, dtype)]
    groups = getattr(kv_cache_config, "kv_cache_groups", None)
    for i, g in enumerate(groups or ()):
        if not all(hasattr(g.kv_cache_spec, a) for a in ("num_kv_heads", "head_size")):
            raise ValueError(f"ObjectCache serves attention KV caches; KV cache group {i} is a "
                             f"{type(g.kv_cache_spec).__name__} (a Mamba state, say)")
    if groups:
        geometry = [(len(g.layer_names), list(g.layer_names), g.kv_cache_spec.num_kv_heads,
                     g.kv_cache_spec.head_size, g.kv_cache_spec.block_size,
                     getattr(g.kv_cache_spec, "dtype", dtype)) for g in groups]
    # Each tensor-parallel rank holds its own KV heads: its chunks are its own (the workers
    # derive their keys in their own namespace from the scheduler's tokens). MLA latents are the
    # same on every rank: one namespace, written by the first rank only.
    rank = parallel.rank if hasattr(parallel, "rank") else 0
    latent = bool(getattr(model, "use_mla", False))
    name = (f"{model.model}/mla" if latent
            else f"{model.model}/tp{parallel.tensor_parallel_size}.{rank}")
    endpoints = extra.pop("endpoints")
    endpoints = endpoints if isinstance(endpoints, list) else [endpoints]
    bucket = extra.pop("bucket")
    configs = []
    for i, (layers, names, kv_heads, head_size, block_size, group_dtype) in enumerate(geometry):
        # Several groups: each its own namespace (its layers are other layers).
        group_name = name if len(geometry) == 1 else f"{name}/group{i}"
        layout = layout_for_model(group_name, layers, kv_heads, head_size,
                                  _dtype_name(group_dtype), tokens_per_chunk=block_size,
                                  latent=latent)
        configs.append(kvc.ConnectorConfig(
            endpoints, bucket, layout, saves=not latent or rank == 0,
            layer_names=names if len(geometry) > 1 else None, null_block=0, **extra))
    return configs


def _cached_requests(cached, groups: int) -> list[kvc.CachedRequest]:
    """vLLM's CachedRequestData (parallel lists) as CachedRequests."""
    if cached is None:
        return []
    resumed = set(getattr(cached, "resumed_req_ids", None) or ())
    flags = getattr(cached, "resumed_from_preemption", None)  # older vLLM: a list of flags
    out = []
    for i, rid in enumerate(cached.req_ids):
        was_resumed = rid in resumed or bool(flags and flags[i])
        out.append(kvc.CachedRequest(rid, _block_ids(cached.new_block_ids[i], groups),
                                     cached.num_computed_tokens[i], was_resumed))
    return out


class ObjectCacheVllmConnector(KVConnectorBase_V1, SupportsHMA):
    def __init__(self, vllm_config, role, kv_cache_config=None):
        try:
            super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        except TypeError:  # a vLLM from before the third argument
            super().__init__(vllm_config=vllm_config, role=role)
        side = kvc.Role.SCHEDULER if role == KVConnectorRole.SCHEDULER else kvc.Role.WORKER
        configs = configs_from_vllm(vllm_config, kv_cache_config)
        self.groups = len(configs)
        self.impl = (kvc.ObjectCacheConnector(configs[0], side) if self.groups == 1
                     else kvc.GroupedConnector(configs, side))

    # ---- start-up ----
    @classmethod
    def get_required_kvcache_layout(cls, vllm_config):
        return None  # any: blocks are addressed by the tensors' strides

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config) -> bool:
        return True  # the layerwise hooks must run: full CUDA graphs would skip them

    @property
    def requires_kv_delivery(self) -> bool:
        return False  # a best-effort cache: a request never waits for a save

    # ---- scheduler side ----
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return self.impl.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        self.impl.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output):
        new = [kvc.NewRequest(SimpleNamespace(request_id=r.req_id),
                              _block_ids(r.block_ids, self.groups))
               for r in scheduler_output.scheduled_new_reqs]
        out = kvc.SchedulerOutput(
            new, dict(scheduler_output.num_scheduled_tokens),
            _cached_requests(getattr(scheduler_output, "scheduled_cached_reqs", None),
                             self.groups))
        meta = self.impl.build_connector_meta(out)
        if meta.has_loads:
            # Loads land layer by layer inside the forward: vLLM must start them before it.
            scheduler_output.has_sync_kv_loads = True
        return ObjectCacheVllmMetadata(meta)

    def request_finished(self, request, block_ids):
        return self.impl.request_finished(request, block_ids)

    def request_finished_all_groups(self, request, block_ids):
        """SupportsHMA's: once, when the request is done in every group."""
        return self.impl.request_finished(request, block_ids)

    # ---- worker side ----
    def register_kv_caches(self, kv_caches):
        self.impl.register_kv_caches(kv_caches)

    def bind_connector_metadata(self, connector_metadata):
        super().bind_connector_metadata(connector_metadata)
        self.impl.bind_connector_metadata(connector_metadata.meta)

    def clear_connector_metadata(self):
        super().clear_connector_metadata()
        self.impl.clear_connector_metadata()

    def start_load_kv(self, forward_context, **kwargs):
        self.impl.start_load_kv(forward_context, **kwargs)

    def wait_for_layer_load(self, layer_name):
        self.impl.wait_for_layer_load(layer_name)

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        self.impl.save_kv_layer(layer_name, kv_layer, attn_metadata, **kwargs)

    def wait_for_save(self):
        self.impl.wait_for_save()

    def get_finished(self, finished_req_ids):
        return self.impl.get_finished(finished_req_ids)

    def get_block_ids_with_load_errors(self):
        return self.impl.get_block_ids_with_load_errors()

    def shutdown(self):
        self.impl.shutdown()
