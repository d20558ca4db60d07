"""ObjectCache as a vLLM v1 KV connector: a thin adapter over objectcache.connector.

    vllm serve MODEL --block-size 16 --kv-transfer-config '{
        "kv_connector": "ObjectCacheVllmConnector",
        "kv_connector_module_path": "objectcache.vllm_connector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"endpoints": ["http://127.0.0.1:9000"], "bucket": "kv",
                                      "access_key": "...", "secret_key": "..."}}'

Everything the connector does is ObjectCacheConnector's, which the reference engine
(objectcache.engine) drives and CI tests. This module only translates vLLM's objects: the layout
from the model config, the role, the scheduled requests' block ids, the metadata class. vLLM
cannot be installed on the machines this project is built on, so this adapter has not run inside
vLLM (docs/python.md says what was and was not run). It needs vLLM's KV connector v1 API and a
paged KV cache of [num_blocks, 2, block_size, kv_heads, head_dim] per layer (FlashInfer's);
FlashAttention's [2, num_blocks, ...] is refused with a clear error.
"""
from __future__ import annotations

from types import SimpleNamespace

from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                               KVConnectorMetadata,
                                                               KVConnectorRole)

from . import connector as kvc
from . import layout_for_model


class ObjectCacheVllmMetadata(KVConnectorMetadata):
    def __init__(self, meta: kvc.ConnectorMetadata):
        self.meta = meta


def _first_group(block_ids):
    """vLLM gives one list of block ids per KV cache group; ObjectCache serves one group."""
    if block_ids and isinstance(block_ids[0], (list, tuple)):
        if len(block_ids) != 1:
            raise ValueError("ObjectCache serves models with one KV cache group")
        return list(block_ids[0])
    return list(block_ids)


def config_from_vllm(vllm_config) -> kvc.ConnectorConfig:
    extra = dict(vllm_config.kv_transfer_config.kv_connector_extra_config or {})
    model, parallel, cache = (vllm_config.model_config, vllm_config.parallel_config,
                              vllm_config.cache_config)
    dtype = model.dtype if cache.cache_dtype == "auto" else cache.cache_dtype
    # Each tensor-parallel rank holds its own KV heads: its chunks are its own.
    rank = parallel.rank if hasattr(parallel, "rank") else 0
    name = f"{model.model}/tp{parallel.tensor_parallel_size}.{rank}"
    layout = layout_for_model(name, model.get_num_layers(parallel),
                              model.get_num_kv_heads(parallel), model.get_head_size(), dtype,
                              tokens_per_chunk=cache.block_size,
                              latent=bool(getattr(model, "use_mla", False)))
    endpoints = extra.pop("endpoints")
    bucket = extra.pop("bucket")
    return kvc.ConnectorConfig(endpoints if isinstance(endpoints, list) else [endpoints], bucket,
                               layout, **extra)


class ObjectCacheVllmConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config, role):
        super().__init__(vllm_config=vllm_config, role=role)
        side = kvc.Role.SCHEDULER if role == KVConnectorRole.SCHEDULER else kvc.Role.WORKER
        self.impl = kvc.ObjectCacheConnector(config_from_vllm(vllm_config), side)

    # ---- scheduler side ----
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return self.impl.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        self.impl.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output):
        new = [kvc.NewRequest(SimpleNamespace(request_id=r.req_id), _first_group(r.block_ids))
               for r in scheduler_output.scheduled_new_reqs]
        out = kvc.SchedulerOutput(new, dict(scheduler_output.num_scheduled_tokens))
        return ObjectCacheVllmMetadata(self.impl.build_connector_meta(out))

    def request_finished(self, request, block_ids):
        return self.impl.request_finished(request, block_ids)

    # ---- worker side ----
    def register_kv_caches(self, kv_caches):
        for name, cache in kv_caches.items():
            if cache.dim() != 5 or cache.shape[1] != 2:
                raise ValueError(f"{name}: a KV cache of shape {tuple(cache.shape)}; ObjectCache "
                                 "needs [num_blocks, 2, block_size, kv_heads, head_dim]")
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
