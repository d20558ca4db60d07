#include "wire/lookup_wire.h"

#include <cstring>

namespace objectcache::wire {

std::string PutChunkKeys(std::span<const ChunkKey> keys) {
  std::string out(keys.size() * ChunkKey::kBytes, '\0');
  for (size_t i = 0; i < keys.size(); ++i) {
    std::memcpy(out.data() + i * ChunkKey::kBytes, keys[i].bytes().data(), ChunkKey::kBytes);
  }
  return out;
}

Result<std::vector<ChunkKey>> ParseChunkKeys(std::span<const std::byte> body, size_t max_keys) {
  if (body.empty() || body.size() % ChunkKey::kBytes != 0 ||
      body.size() / ChunkKey::kBytes > max_keys) {
    return InvalidArgumentError("a binary lookup body is 1 to " + std::to_string(max_keys) +
                                " chunk keys of " + std::to_string(ChunkKey::kBytes) +
                                " bytes each, not " + std::to_string(body.size()) + " bytes");
  }
  std::vector<ChunkKey> keys;
  keys.reserve(body.size() / ChunkKey::kBytes);
  for (size_t at = 0; at < body.size(); at += ChunkKey::kBytes) {
    keys.push_back(ChunkKey::FromBytes(std::span<const uint8_t, ChunkKey::kBytes>(
        reinterpret_cast<const uint8_t*>(body.data() + at), ChunkKey::kBytes)));
  }
  return keys;
}

}  // namespace objectcache::wire
