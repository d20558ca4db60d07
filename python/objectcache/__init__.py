"""ObjectCache for Python engines: the C++ client over torch tensors, a layerwise save path, an
engine-neutral connector with vLLM's KV connector v1 shape and a reference engine (docs/python.md).

    import objectcache
    layout = objectcache.Layout(32, 8, 128, "bf16", name="llama-3.1-8b")
    client = objectcache.Client(["http://127.0.0.1:9000"], "kv", layout)
    keys = objectcache.chunk_keys(prompt_token_ids, layout)
    hits = client.lookup(keys)
    r = client.retrieve_layerwise(keys[:hits], layout.layers, kv_caches, block_table=blocks)
    r.wait_for_layer(0)   # just before layer 0's attention

KV caches in GPU memory (torch CUDA tensors) take client.retrieve_to_device and
client.save_from_device (docs/gpu.md).
"""
from ._native import (Client, Device, DeviceRetrieval, DeviceSave, Error,  # noqa: F401
                      Layout, Retrieval, Save, chunk_keys, encode_chunk)

__all__ = ["Client", "Device", "DeviceRetrieval", "DeviceSave", "Error", "Layout", "Retrieval",
           "Save", "chunk_keys", "encode_chunk", "layout_for_model"]

_TORCH_DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32",
                 "torch.uint8": "fp8", "torch.int8": "fp8", "torch.float8_e4m3fn": "fp8",
                 "torch.float8_e5m2": "fp8"}


def layout_for_model(name: str, layers: int, kv_heads: int, head_dim: int, dtype,
                     tokens_per_chunk: int = 16, latent: bool = False) -> Layout:
    """A layout from a model's shape; `dtype` is a torch dtype or "bf16"/"fp16"/"fp8"/"fp32".
    For an MLA model (latent=True) give kv_heads=1 and head_dim = the latent width (DeepSeek-V3:
    512 + 64)."""
    text = dtype if isinstance(dtype, str) else _TORCH_DTYPES.get(str(dtype))
    if text is None:
        raise TypeError(f"no KV dtype for {dtype}")
    return Layout(layers, kv_heads, head_dim, text, tokens_per_chunk, name, latent)
