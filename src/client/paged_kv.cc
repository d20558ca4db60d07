// Paged KV layouts and the copy segments between a staging buffer of chunk slices and an
// engine's blocks (include/objectcache/device_kv.h).
#include <string>

#include "objectcache/device_kv.h"

namespace objectcache {
namespace {

// a x b, or UINT64_MAX past 64 bits (then a layout cannot validate).
uint64_t Mul(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
uint64_t Add(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t VectorBytes(const KvLayout& kv) { return Mul(kv.head_dim, KvDtypeBytes(kv.dtype)); }
uint32_t Kinds(const KvLayout& kv) { return kv.kind == KvKind::kLatent ? 1 : 2; }

}  // namespace

PagedKvLayout PagedKvLayout::FlashAttn(const KvLayout& kv, uint64_t num_blocks,
                                       uint32_t block_size) {
  const uint64_t vec = VectorBytes(kv), block = Mul(Mul(block_size, kv.num_kv_heads), vec);
  return {.block_size = block_size,
          .num_blocks = num_blocks,
          .block_stride = block,
          .token_stride = Mul(kv.num_kv_heads, vec),
          .head_stride = vec,
          .kv_stride = Mul(num_blocks, block),
          .layer_bytes = Mul(2, Mul(num_blocks, block))};
}

PagedKvLayout PagedKvLayout::FlashInfer(const KvLayout& kv, uint64_t num_blocks,
                                        uint32_t block_size) {
  const uint64_t vec = VectorBytes(kv), half = Mul(Mul(block_size, kv.num_kv_heads), vec);
  return {.block_size = block_size,
          .num_blocks = num_blocks,
          .block_stride = Mul(2, half),
          .token_stride = Mul(kv.num_kv_heads, vec),
          .head_stride = vec,
          .kv_stride = half,
          .layer_bytes = Mul(num_blocks, Mul(2, half))};
}

PagedKvLayout PagedKvLayout::FlashInferHnd(const KvLayout& kv, uint64_t num_blocks,
                                           uint32_t block_size) {
  // FlashInfer's block with heads outside tokens.
  PagedKvLayout l = FlashInfer(kv, num_blocks, block_size);
  l.token_stride = VectorBytes(kv);
  l.head_stride = Mul(block_size, VectorBytes(kv));
  return l;
}

PagedKvLayout PagedKvLayout::Latent(const KvLayout& kv, uint64_t num_blocks, uint32_t block_size) {
  const uint64_t vec = VectorBytes(kv);
  return {.block_size = block_size,
          .num_blocks = num_blocks,
          .block_stride = Mul(block_size, vec),
          .token_stride = vec,
          .head_stride = vec,
          .kv_stride = 0,
          .layer_bytes = Mul(num_blocks, Mul(block_size, vec))};
}

Status PagedKvLayout::Validate(const KvLayout& kv) const {
  OC_RETURN_IF_ERROR(kv.Validate());
  if (block_size == 0 || num_blocks == 0 || layer_bytes == 0) {
    return InvalidArgumentError("a paged KV layout needs a block size, blocks and a layer size");
  }
  if (kv.kind == KvKind::kLatent && kv.num_kv_heads != 1) {
    return InvalidArgumentError("a latent layout has one vector a token");
  }
  // The last byte of the farthest vector of the last block.
  uint64_t end = Mul(num_blocks - 1, block_stride);
  end = Add(end, Mul(block_size - 1, token_stride));
  end = Add(end, Mul(kv.num_kv_heads - 1, head_stride));
  end = Add(end, Mul(Kinds(kv) - 1, kv_stride));
  end = Add(end, VectorBytes(kv));
  if (end == UINT64_MAX || end > layer_bytes) {
    return InvalidArgumentError("the paged KV layout reaches past the layer's " +
                                std::to_string(layer_bytes) + " bytes");
  }
  return Status();
}

Result<PagedSegments> PagedKvSegments(const KvLayout& kv, const PagedKvLayout& paged,
                                      std::span<const uint32_t> block_ids, uint64_t first_token,
                                      size_t chunks) {
  OC_RETURN_IF_ERROR(paged.Validate(kv));
  const uint64_t g = kv.tokens_per_chunk, tokens = Mul(chunks, g);
  const uint64_t last = Add(first_token, tokens);
  if (last == UINT64_MAX || (tokens > 0 && (last - 1) / paged.block_size >= block_ids.size())) {
    return InvalidArgumentError(std::to_string(block_ids.size()) + " blocks of " +
                                std::to_string(paged.block_size) + " tokens do not hold " +
                                std::to_string(chunks) + " chunks from token " +
                                std::to_string(first_token));
  }
  for (uint64_t b = first_token / paged.block_size;
       tokens > 0 && b <= (last - 1) / paged.block_size; ++b) {
    if (block_ids[b] >= paged.num_blocks) {
      return InvalidArgumentError("block " + std::to_string(block_ids[b]) + " is outside the " +
                                  std::to_string(paged.num_blocks) + " blocks of the cache");
    }
  }
  const uint64_t vec = VectorBytes(kv), slice = kv.LayerSliceBytes();
  PagedSegments out;
  for (size_t j = 0; j < chunks; ++j) {
    const size_t chunk_start = out.segments.size();
    uint64_t src = j * slice;
    for (uint32_t kind = 0; kind < Kinds(kv); ++kind) {
      for (uint64_t t = 0; t < g; ++t) {
        const uint64_t pos = first_token + j * g + t;
        const uint64_t token = block_ids[pos / paged.block_size] * paged.block_stride +
                               (pos % paged.block_size) * paged.token_stride +
                               kind * paged.kv_stride;
        for (uint32_t h = 0; h < kv.num_kv_heads; ++h, src += vec) {
          const uint64_t dst = token + h * paged.head_stride;
          device::CopySegment* prev =
              out.segments.size() > chunk_start ? &out.segments.back() : nullptr;
          if (prev && prev->src + prev->bytes == src && prev->dst + prev->bytes == dst) {
            prev->bytes += vec;
          } else {
            out.segments.push_back({.src = src, .dst = dst, .bytes = vec});
          }
        }
      }
    }
    out.chunk_ends.push_back(out.segments.size());
  }
  return out;
}

}  // namespace objectcache
