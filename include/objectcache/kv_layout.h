// KvLayout: the shape of one model's attention KV cache, and its chunking.
//
// A chunk holds the KV of G consecutive tokens (tokens_per_chunk, 16 by default) for every
// layer. Inside a chunk object the KV is layer-major: one contiguous *layer slice* per layer,
// holding K then V for the chunk's G tokens:
//
//   layer slice = G x 2 (K and V) x kv_heads x head_dim x bytes per element
//
// For Llama-3.1-8B in bf16 at G = 16 that is 64 KiB, and a chunk is 32 slices (2 MiB).
// The bytes inside a slice are opaque to ObjectCache: the engine decides how K and V are
// ordered there; ObjectCache only guarantees that slice l of a chunk comes back bit-exact.
//
// The fingerprint is a 64-bit hash of the geometry (not of the model name): two layouts with
// the same fingerprint lay out bytes the same way. It is part of every chunk object's header
// and of the key namespace, and is defined byte by byte in docs/keys.md; it never changes
// between releases.
//
// KvLayout is a plain value, safe to share between threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "objectcache/status.h"

namespace objectcache {

enum class KvDtype : uint8_t {
  kBf16 = 1,
  kFp16 = 2,
  kFp8 = 3,  // e4m3 or e5m2: one byte either way; the engine knows which.
  kFp32 = 4,
};

// What a layer holds per token: K and V (multi-head and grouped-query attention), or one latent
// vector (multi-head latent attention, as DeepSeek's MLA caches: kv_heads = 1 and head_dim the
// latent width, compressed KV and rotary part together).
enum class KvKind : uint8_t {
  kKeyValue = 0,
  kLatent = 1,
};

// "bf16", "fp16", "fp8", "fp32".
std::string_view KvDtypeName(KvDtype dtype);
Result<KvDtype> ParseKvDtype(std::string_view name);
uint32_t KvDtypeBytes(KvDtype dtype);

struct KvLayout {
  static constexpr uint32_t kDefaultTokensPerChunk = 16;
  // Limits that keep every derived size well inside 64 bits and a header inside 4 KiB.
  static constexpr uint32_t kMaxLayers = 256;
  static constexpr uint32_t kMaxKvHeads = 1024;
  static constexpr uint32_t kMaxHeadDim = 4096;
  static constexpr uint32_t kMaxTokensPerChunk = 4096;

  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  KvDtype dtype = KvDtype::kBf16;
  uint32_t tokens_per_chunk = kDefaultTokensPerChunk;
  KvKind kind = KvKind::kKeyValue;

  // Bytes of K and V (or of the latent vector) for one token in one layer.
  uint64_t TokenLayerBytes() const;
  // Bytes of one layer of one chunk: the unit of a layerwise read.
  uint64_t LayerSliceBytes() const;
  // KV bytes of one chunk over all layers (without the object header or padding).
  uint64_t ChunkKvBytes() const;
  // KV bytes per token over all layers.
  uint64_t TokenBytes() const;

  // Stable 64-bit fingerprint of the geometry (docs/keys.md).
  uint64_t Fingerprint() const;

  // InvalidArgument when a field is zero or above its limit.
  Status Validate() const;

  // "32 layers x 8 kv heads x 128 dim, bf16, G=16"
  std::string ToString() const;

  friend bool operator==(const KvLayout&, const KvLayout&) = default;
};

// A named model: the name goes into the key namespace, the layout into the chunk format.
struct ModelPreset {
  std::string name;
  KvLayout layout;
};

// The model presets (docs/engine.md): "llama-3.1-8b", "llama-3.1-70b", "granite-3.3-8b",
// "deepseek-r1-distill-qwen-7b".
const std::vector<ModelPreset>& ModelPresets();

// A preset by name; NotFound lists the known names.
Result<ModelPreset> FindModelPreset(std::string_view name);

// Parses a layout from JSON:
//   {"name": "my-model", "layers": 32, "kv_heads": 8, "head_dim": 128,
//    "dtype": "bf16", "tokens_per_chunk": 16, "kv": "latent"}
// "name", "tokens_per_chunk" and "kv" ("kv" for K and V, the default, or "latent") are optional.
// InvalidArgument on malformed input.
Result<ModelPreset> ParseModelJson(std::string_view json);

// The JSON form accepted by ParseModelJson.
std::string ModelToJson(const ModelPreset& model);

// Resolves what a user typed for --layout: a preset name, or a path to a JSON file
// (anything containing '/' or ending in ".json") of at most kMaxLayoutFileBytes.
inline constexpr size_t kMaxLayoutFileBytes = 64 << 10;
Result<ModelPreset> ResolveModel(std::string_view name_or_path);

}  // namespace objectcache
