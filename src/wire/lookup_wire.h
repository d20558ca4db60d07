// The binary batch-lookup body (docs/s3-api.md, "Extension: batch lookup"): the chunk keys as
// their 16 bytes each, back to back, sent with content type kChunkKeysContentType. The JSON
// body of hex keys stays accepted; this one spares both ends a JSON pass over 8192 keys.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "objectcache/chunk_key.h"
#include "objectcache/status.h"

namespace objectcache::wire {

inline constexpr std::string_view kChunkKeysContentType = "application/x-objectcache-keys";

std::string PutChunkKeys(std::span<const ChunkKey> keys);
// InvalidArgument unless `body` is 1 to `max_keys` whole keys.
Result<std::vector<ChunkKey>> ParseChunkKeys(std::span<const std::byte> body, size_t max_keys);

}  // namespace objectcache::wire
