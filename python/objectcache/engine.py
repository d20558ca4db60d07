"""A reference engine: a small Llama-architecture decoder in plain torch, with a paged KV cache and
prefix caching through ObjectCache (docs/python.md, "The reference engine").

The model has what Llama 3 has (RMSNorm, rotary position embeddings, grouped-query attention,
a SwiGLU MLP) with random weights from a fixed seed, so every process that builds the same
config computes the same KV. Its KV cache is paged like vLLM's: per layer one tensor
[num_blocks, 2, block_size, kv_heads, head_dim] with block_size = tokens per chunk, so one block
is exactly one chunk's layer slice and a retrieval lands in blocks without a copy.

Prefill is layer-major: layer l of every new token, then layer l + 1. Just before layer l's
attention reads the cached prefix, the engine waits for that layer of the retrieval, and just
after it has written the new tokens' K and V it hands them to the save path. All cache traffic
goes through the connector's vLLM-shaped calls (objectcache.connector).

`step` picks the operation order: None computes all new tokens of a layer at once (fast);
an integer (a multiple of the chunk size) computes them in blocks of that many tokens aligned to
position 0, so a token's arithmetic is the same whether the tokens before it were computed or
restored, and the logits match a full recompute bit for bit.

`ModelConfig.device` puts the weights, the paged cache and the forward pass on a torch device.
On a CUDA device attention is torch's fused scaled-dot-product attention (causal, aligned to the
last key) instead of the query blocks, and the cache is a CUDA tensor the connector fills and
saves through the device path (docs/gpu.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from . import connector as kvc


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 512
    hidden: int = 128
    layers: int = 4
    heads: int = 8
    kv_heads: int = 2
    intermediate: int = 344
    rope_theta: float = 500000.0
    rms_eps: float = 1e-5
    dtype: torch.dtype = torch.float32
    seed: int = 0
    device: str = "cpu"  # where the weights are made and the forward pass runs

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def name(self) -> str:
        # The weights follow from the config, so the config names the model (part of every key).
        # A device's random generator gives other weights than the CPU's from the same seed.
        where = "" if self.device == "cpu" else "-" + torch.device(self.device).type
        return (f"objectcache-ref-v{self.vocab_size}-h{self.hidden}-l{self.layers}-q{self.heads}"
                f"-kv{self.kv_heads}-i{self.intermediate}-s{self.seed}{where}")

    def validate(self) -> None:
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError("hidden must divide into heads, heads into kv_heads")


DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def layout_for(config: ModelConfig, tokens_per_chunk: int = 16):
    """The ObjectCache layout of this model's KV."""
    from . import Layout
    return Layout(config.layers, config.kv_heads, config.head_dim, DTYPE_NAMES[config.dtype],
                  tokens_per_chunk, config.name)


class ReferenceModel:
    """Random weights from config.seed; the forward pass works on a PagedKvCache."""

    def __init__(self, config: ModelConfig):
        config.validate()
        self.config = config
        self.device = dev = torch.device(config.device)
        g = torch.Generator(device=dev).manual_seed(config.seed)
        c, d = config, config.dtype

        def randn(*shape):
            return torch.randn(*shape, generator=g, device=dev)

        def w(*shape):
            return (randn(*shape) / math.sqrt(shape[-1])).to(d)

        self.embed = randn(c.vocab_size, c.hidden).to(d)
        self.layers = []
        for _ in range(c.layers):
            self.layers.append({
                "attn_norm": (1 + 0.1 * randn(c.hidden)).to(d),
                "wq": w(c.heads * c.head_dim, c.hidden),
                "wk": w(c.kv_heads * c.head_dim, c.hidden),
                "wv": w(c.kv_heads * c.head_dim, c.hidden),
                "wo": w(c.hidden, c.heads * c.head_dim),
                "mlp_norm": (1 + 0.1 * randn(c.hidden)).to(d),
                "w_gate": w(c.intermediate, c.hidden),
                "w_up": w(c.intermediate, c.hidden),
                "w_down": w(c.hidden, c.intermediate),
            })
        self.final_norm = (1 + 0.1 * randn(c.hidden)).to(d)
        self.lm_head = w(c.vocab_size, c.hidden)
        half = c.head_dim // 2
        self.inv_freq = 1.0 / (c.rope_theta ** (
            torch.arange(0, half, dtype=torch.float64, device=dev) / half))

    def rms_norm(self, x, weight):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.config.rms_eps)).to(x.dtype) * weight

    def rope(self, x, positions):
        # x: [tokens, heads, head_dim]; rotate-half convention (Llama's).
        angles = positions.to(torch.float64)[:, None] * self.inv_freq[None, :]
        cos = torch.cat([angles.cos(), angles.cos()], -1)[:, None, :].to(x.dtype)
        sin = torch.cat([angles.sin(), angles.sin()], -1)[:, None, :].to(x.dtype)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rotated * sin

    # Queries are attended in blocks of this many positions, aligned to absolute multiples of it,
    # each against the keys up to its own end only: causal attention without the masked half,
    # with scores small enough to stay in cache. A position's block depends on the position
    # alone, so its arithmetic is the same whether the tokens before it were restored or not.
    QUERY_BLOCK = 64

    def attention(self, q, k, v, q_positions):
        # q: [s, heads, hd] at consecutive positions; k, v: [n, kv_heads, hd] for positions
        # 0..n-1; causal. Query head h reads KV head h // group, without copying K or V.
        if q.is_cuda:
            return self._fused_attention(q, k, v)
        c = self.config
        s, group = q.shape[0], c.heads // c.kv_heads
        q = (q * (1.0 / math.sqrt(c.head_dim))).view(s, c.kv_heads, group, c.head_dim)
        out = torch.empty_like(q)
        first, qb = int(q_positions[0]), self.QUERY_BLOCK
        edges = [0] + list(range((first // qb + 1) * qb - first, s, qb)) + [s]
        for a, b in zip(edges, edges[1:]):
            start, end = first + a, first + b  # keys 0..end-1; those before start: all visible
            scores = torch.einsum("skgd,nkd->kgsn", q[a:b], k[:end])
            hidden = torch.arange(start, end)[None, :] > q_positions[a:b, None]
            scores[..., start:end].masked_fill_(hidden, float("-inf"))
            probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
            out[a:b] = torch.einsum("kgsn,nkd->skgd", probs, v[:end])
        return out.view(s, c.heads, c.head_dim)

    def _fused_attention(self, q, k, v):
        # The queries are the last s of the n positions: causal attention aligned to the last key.
        s, n, group = q.shape[0], k.shape[0], self.config.heads // self.config.kv_heads
        q = q.transpose(0, 1)[None]
        k = k.transpose(0, 1).repeat_interleave(group, 0)[None]
        v = v.transpose(0, 1).repeat_interleave(group, 0)[None]
        try:
            from torch.nn.attention.bias import causal_lower_right
            mask = causal_lower_right(s, n)
        except ImportError:  # torch before 2.2
            mask = torch.ones(s, n, dtype=torch.bool, device=q.device).tril(n - s)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out[0].transpose(0, 1)


class PagedKvCache:
    """Per layer [num_blocks, 2, block_size, kv_heads, head_dim]; blocks handed out from a free
    list, as vLLM's block pool does."""

    def __init__(self, config: ModelConfig, num_blocks: int, block_size: int):
        self.block_size = block_size
        self.device = torch.device(config.device)
        self.layers = [torch.zeros(num_blocks, 2, block_size, config.kv_heads, config.head_dim,
                                   dtype=config.dtype, device=self.device)
                       for _ in range(config.layers)]
        self.free = list(range(num_blocks))

    def allocate(self, tokens: int) -> list[int]:
        n = -(-tokens // self.block_size)
        if n > len(self.free):
            raise MemoryError(f"{n} blocks asked, {len(self.free)} free")
        blocks, self.free = self.free[:n], self.free[n:]
        return blocks

    def release(self, blocks: list[int]) -> None:
        self.free.extend(blocks)

    def block_table(self, blocks: list[int]):
        """The request's blocks as an index tensor on the cache's device."""
        return torch.tensor(blocks, dtype=torch.long).to(self.device)

    def write(self, layer: int, blocks, first: int, k, v) -> None:
        """K and V of positions first.. into the request's blocks (a list, or block_table's)."""
        g = self.block_size
        if not torch.is_tensor(blocks):
            blocks = self.block_table(blocks)
        p = torch.arange(first, first + k.shape[0], device=self.device)
        b = blocks[p // g]
        self.layers[layer][b, 0, p % g] = k
        self.layers[layer][b, 1, p % g] = v

    def gather(self, layer: int, blocks, n: int):
        """K and V of positions 0..n-1: [n, kv_heads, head_dim] each."""
        used = self.layers[layer][blocks[:-(-n // self.block_size)]]
        k = used[:, 0].reshape(-1, *used.shape[3:])[:n]
        v = used[:, 1].reshape(-1, *used.shape[3:])[:n]
        return k, v


@dataclass
class Request:
    """What the connector reads from a request (vLLM's Request has the same fields)."""
    request_id: str
    prompt_token_ids: list[int]
    lora_name: str | None = None
    cache_salt: str | None = None


@dataclass
class PrefillResult:
    logits: torch.Tensor          # the last prompt token's logits
    cached_tokens: int            # prompt tokens whose KV came from the cache
    attempts: int                 # 1, or more when a load failed and the rest was recomputed
    layer_seconds: list[float] = field(default_factory=list)


class Engine:
    """One model, one paged cache, and the two halves of a connector (scheduler and worker), as
    one vLLM process has them."""

    def __init__(self, model: ReferenceModel, num_blocks: int,
                 connector_config: kvc.ConnectorConfig | None = None, step: int | None = None):
        self.model = model
        c = model.config
        g = connector_config.tokens_per_chunk if connector_config else 16
        if step is not None and (step <= 0 or step % g):
            raise ValueError("step must be a positive multiple of the chunk size")
        self.step = step
        self.cache = PagedKvCache(c, num_blocks, g)
        self.layer_names = [f"model.layers.{i}.self_attn.attn" for i in range(c.layers)]
        self.scheduler = self.worker = None
        if connector_config is not None:
            self.scheduler = kvc.ObjectCacheConnector(connector_config, kvc.Role.SCHEDULER)
            self.worker = kvc.ObjectCacheConnector(connector_config, kvc.Role.WORKER)
            self.worker.register_kv_caches(dict(zip(self.layer_names, self.cache.layers)))

    def close(self) -> None:
        for side in (self.worker, self.scheduler):
            if side is not None:
                side.close()

    def prefill(self, request: Request) -> PrefillResult:
        """Computes the prompt's KV (restoring what the cache has) and the last token's logits."""
        tokens = request.prompt_token_ids
        blocks = self.cache.allocate(len(tokens))
        try:
            attempts, limit = 0, None
            while True:
                attempts += 1
                result = self._attempt(request, blocks, limit)
                if result is not None:
                    result.attempts = attempts
                    return result
                # A load failed: recompute from its first bad chunk (the scheduler's lookup is
                # capped there), never using the KV that did not arrive verified.
                limit = self.worker.take_load_error(request.request_id)
        finally:
            if self.scheduler is not None:
                self.scheduler.request_finished(request, blocks)
            self.cache.release(blocks)

    def _attempt(self, request, blocks, limit):
        tokens = request.prompt_token_ids
        cached = 0
        if self.scheduler is not None:
            cached, _ = self.scheduler.get_num_new_matched_tokens(request, 0, limit=limit)
            self.scheduler.update_state_after_alloc(request, blocks, cached)
            meta = self.scheduler.build_connector_meta(
                kvc.SchedulerOutput([kvc.NewRequest(request, blocks)]))
            self.worker.bind_connector_metadata(meta)
            self.worker.start_load_kv(None)
        try:
            logits, seconds = self._forward(request, tokens, blocks, cached)
        finally:
            if self.worker is not None:
                self.worker.wait_for_save()
                self.worker.clear_connector_metadata()
        if logits is None:
            return None
        return PrefillResult(logits, cached, 1, seconds)

    def _forward(self, request, tokens, blocks, cached):
        import time
        m, c = self.model, self.model.config
        n = len(tokens)
        ids = torch.tensor(tokens[cached:], dtype=torch.long).to(m.device)
        x = m.embed[ids].clone()
        positions = torch.arange(cached, n, device=m.device)
        table = self.cache.block_table(blocks)
        # The new tokens, in the blocks of operations that the step gives (aligned to 0).
        if self.step is None:
            spans = [(0, n - cached)]
        else:
            edges = [cached] + [p for p in range((cached // self.step + 1) * self.step, n,
                                                 self.step)] + [n]
            spans = [(a - cached, b - cached) for a, b in zip(edges, edges[1:])]
        seconds = []
        for layer, w in enumerate(m.layers):
            t0 = time.perf_counter()
            name = self.layer_names[layer]
            for i, (a, b) in enumerate(spans):
                h, pos = m.rms_norm(x[a:b], w["attn_norm"]), positions[a:b]
                q = m.rope((h @ w["wq"].T).view(b - a, c.heads, c.head_dim), pos)
                k = m.rope((h @ w["wk"].T).view(b - a, c.kv_heads, c.head_dim), pos)
                v = (h @ w["wv"].T).view(b - a, c.kv_heads, c.head_dim)
                self.cache.write(layer, table, cached + a, k, v)
                if i == 0 and self.worker is not None:
                    # The cached prefix's layer must be in before attention reads it.
                    self.worker.wait_for_layer_load(name)
                    if self.worker.has_load_error(request.request_id):
                        return None, seconds
                keys, values = self.cache.gather(layer, table, cached + b)
                attn = m.attention(q, keys, values, pos).reshape(b - a, -1) @ w["wo"].T
                y = x[a:b] + attn
                h = m.rms_norm(y, w["mlp_norm"])
                gate = torch.nn.functional.silu(h @ w["w_gate"].T)
                x[a:b] = y + (gate * (h @ w["w_up"].T)) @ w["w_down"].T
            if self.worker is not None:
                self.worker.save_kv_layer(name, self.cache.layers[layer], None)
            seconds.append(time.perf_counter() - t0)
        last = m.rms_norm(x[-1:], m.final_norm)
        return (last @ m.lm_head.T)[0], seconds
