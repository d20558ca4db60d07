// ChunkKey and the prefix hash chain.
//
// A prompt's tokens are cut into chunks of G tokens (KvLayout::tokens_per_chunk). Chunk i is
// named by a 128-bit key that hashes the key of chunk i-1, the key namespace and chunk i's G
// token ids, so a key names a whole prefix, not a position: the same prefix gives the same
// keys on every machine, in every process and in every release, with no central index.
// The exact byte-level definition is in docs/keys.md and is pinned by golden test vectors;
// changing it is a format break.
//
// The namespace folds in the model name, the layout fingerprint, an optional tenant salt, LoRA
// adapter and per-request cache salt, so two models, two adapters or two tenants that do not
// trust each other never share a key.
//
// Engines that already hash their blocks (vLLM's block hashes) can use their own 128-bit
// hashes verbatim (ChunkKey::FromBytes) or folded into a namespace (KeyNamespace::FromBlockHash).
//
// A key's text form is 32 lowercase hex digits, most significant byte first; it is the object
// name under which a chunk is stored. All types here are values, safe to share between threads.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "objectcache/kv_layout.h"
#include "objectcache/status.h"

namespace objectcache {

class ChunkKey {
 public:
  static constexpr size_t kBytes = 16;
  static constexpr size_t kHexChars = 2 * kBytes;
  using Bytes = std::array<uint8_t, kBytes>;

  // The all-zero key: the parent of a prompt's first chunk.
  ChunkKey() = default;
  explicit ChunkKey(const Bytes& bytes) : bytes_(bytes) {}

  static ChunkKey FromBytes(std::span<const uint8_t, kBytes> bytes);
  // Exactly 32 hex digits (either case). InvalidArgument otherwise.
  static Result<ChunkKey> FromHex(std::string_view hex);

  const Bytes& bytes() const { return bytes_; }
  // 32 lowercase hex digits.
  std::string ToHex() const;

  friend auto operator<=>(const ChunkKey&, const ChunkKey&) = default;

 private:
  Bytes bytes_{};
};

// Everything besides the model and the layout that changes the KV of the same tokens. Leaving
// one out serves one adapter's or one tenant's KV to another.
struct KeyScope {
  std::string_view tenant_salt;  // empty for a cache shared by everyone who can reach it
  std::string_view adapter;      // the LoRA adapter's name; empty for the base model
  std::string_view cache_salt;   // the request's own cache salt (vLLM's cache_salt); often empty
};

class KeyNamespace {
 public:
  // `model` is the model name ("llama-3.1-8b"), `tenant_salt` is empty for a shared cache.
  KeyNamespace(std::string_view model, const KvLayout& layout, std::string_view tenant_salt = {});
  KeyNamespace(std::string_view model, const KvLayout& layout, const KeyScope& scope);

  const ChunkKey::Bytes& id() const { return id_; }
  uint32_t tokens_per_chunk() const { return tokens_per_chunk_; }

  // The key of the chunk whose tokens are `chunk_tokens` (exactly tokens_per_chunk ids) and
  // whose predecessor's key is `parent` (ChunkKey() for the first chunk).
  ChunkKey Next(const ChunkKey& parent, std::span<const uint32_t> chunk_tokens) const;

  // Keys of every full chunk of `tokens`, continuing the chain after `parent`. A trailing
  // partial chunk has no key (it is never cached).
  std::vector<ChunkKey> KeysForTokens(std::span<const uint32_t> tokens,
                                      const ChunkKey& parent = ChunkKey()) const;

  // An engine's own 128-bit block hash, folded into this namespace.
  ChunkKey FromBlockHash(std::span<const uint8_t, ChunkKey::kBytes> block_hash) const;

 private:
  ChunkKey::Bytes id_{};
  uint32_t tokens_per_chunk_;
};

}  // namespace objectcache

template <>
struct std::hash<objectcache::ChunkKey> {
  size_t operator()(const objectcache::ChunkKey& k) const noexcept {
    // Keys are hashes already: any 8 of their bytes are uniformly distributed.
    size_t h = 0;
    for (int i = 0; i < 8; ++i) h = (h << 8) | k.bytes()[8 + i];
    return h;
  }
};
