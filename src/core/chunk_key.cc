#include "objectcache/chunk_key.h"

#include <xxhash.h>

#include <cstring>

#include "core/byte_order.h"
#include "core/hex.h"

namespace objectcache {
namespace {

// XXH3-128 with seed 0, in canonical (big-endian: high 64 bits first) byte order.
ChunkKey::Bytes Hash128(const void* data, size_t size) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits_withSeed(data, size, 0));
  ChunkKey::Bytes out;
  std::memcpy(out.data(), canonical.digest, out.size());
  return out;
}

}  // namespace

ChunkKey ChunkKey::FromBytes(std::span<const uint8_t, kBytes> bytes) {
  Bytes b;
  std::memcpy(b.data(), bytes.data(), kBytes);
  return ChunkKey(b);
}

Result<ChunkKey> ChunkKey::FromHex(std::string_view hex) {
  Bytes b;
  if (hex.size() != kHexChars || !DecodeHex(hex, b.data())) {
    return InvalidArgumentError("'" + std::string(hex.substr(0, 64)) +
                                "' is not a chunk key (32 hex digits)");
  }
  return ChunkKey(b);
}

std::string ChunkKey::ToHex() const { return EncodeHex(bytes_.data(), bytes_.size()); }

KeyNamespace::KeyNamespace(std::string_view model, const KvLayout& layout,
                           std::string_view tenant_salt)
    : KeyNamespace(model, layout, KeyScope{.tenant_salt = tenant_salt}) {}

KeyNamespace::KeyNamespace(std::string_view model, const KvLayout& layout, const KeyScope& scope)
    : tokens_per_chunk_(layout.tokens_per_chunk) {
  // docs/keys.md, "Namespace": every text field is length-prefixed, so no two scopes give one
  // record; the adapter and cache salt fields are there only when one of them is not empty.
  ByteWriter w;
  auto text = [&w](std::string_view s) {
    w.U32(static_cast<uint32_t>(s.size()));
    w.Bytes(s.data(), s.size());
  };
  w.Bytes("OCKEYNS1", 8);
  text(model);
  w.U64(layout.Fingerprint());
  text(scope.tenant_salt);
  if (!scope.adapter.empty() || !scope.cache_salt.empty()) {
    text(scope.adapter);
    text(scope.cache_salt);
  }
  id_ = Hash128(w.data(), w.size());
}

ChunkKey KeyNamespace::Next(const ChunkKey& parent, std::span<const uint32_t> chunk_tokens) const {
  // parent (16) || namespace id (16) || token ids as u32 little-endian.
  constexpr size_t kStackTokens = 256;
  uint8_t stack_buf[32 + 4 * kStackTokens];
  std::vector<uint8_t> heap_buf;
  uint8_t* buf = stack_buf;
  const size_t size = 32 + 4 * chunk_tokens.size();
  if (chunk_tokens.size() > kStackTokens) {
    heap_buf.resize(size);
    buf = heap_buf.data();
  }
  std::memcpy(buf, parent.bytes().data(), 16);
  std::memcpy(buf + 16, id_.data(), 16);
  uint8_t* p = buf + 32;
  for (uint32_t t : chunk_tokens) {
    p[0] = static_cast<uint8_t>(t);
    p[1] = static_cast<uint8_t>(t >> 8);
    p[2] = static_cast<uint8_t>(t >> 16);
    p[3] = static_cast<uint8_t>(t >> 24);
    p += 4;
  }
  return ChunkKey(Hash128(buf, size));
}

std::vector<ChunkKey> KeyNamespace::KeysForTokens(std::span<const uint32_t> tokens,
                                                  const ChunkKey& parent) const {
  const size_t g = tokens_per_chunk_;
  std::vector<ChunkKey> keys;
  if (g == 0) return keys;
  keys.reserve(tokens.size() / g);
  ChunkKey prev = parent;
  for (size_t start = 0; start + g <= tokens.size(); start += g) {
    prev = Next(prev, tokens.subspan(start, g));
    keys.push_back(prev);
  }
  return keys;
}

ChunkKey KeyNamespace::FromBlockHash(std::span<const uint8_t, ChunkKey::kBytes> block_hash) const {
  uint8_t buf[8 + 16 + 16];
  std::memcpy(buf, "OCBLOCK1", 8);
  std::memcpy(buf + 8, id_.data(), 16);
  std::memcpy(buf + 24, block_hash.data(), 16);
  return ChunkKey(Hash128(buf, sizeof(buf)));
}

}  // namespace objectcache
