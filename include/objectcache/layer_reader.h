// Reading chunk layers layer-major from any store.
//
// Given an ordered list of chunk keys and a layer range [first, last), produces for each layer
// in order the concatenation of that layer's slice of every chunk, in list order: exactly the
// bytes an engine's layerwise prefill consumes. Every slice is checked against its chunk's
// header (layout, key, layer checksum) before it is handed over; nothing unchecked leaves.
//
// This is the store-side building block of layerwise retrieval: the server's layerwise
// response reads its hit prefix with ReadChunkHeaderPrefix, and `objectcache kv get-layers` is
// a thin wrapper of ReadLayersLayerMajor. Thread-compatible: one call per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "objectcache/chunk_object.h"

#include "objectcache/chunk_key.h"
#include "objectcache/kv_layout.h"
#include "objectcache/status.h"
#include "objectcache/store.h"

namespace objectcache {

struct LayerRange {
  uint32_t first = 0;
  uint32_t last = 0;  // exclusive

  // "A:B" -> [A, B). InvalidArgument when malformed, empty or beyond `num_layers`.
  static Result<LayerRange> Parse(std::string_view text, uint32_t num_layers);
};

// Chunk headers ReadChunkHeaderPrefix reads with one batched call.
inline constexpr size_t kChunkHeaderGroup = 256;

// The headers ReadChunkHeaderPrefix found, and where the prefix stops.
struct ChunkHeaderPrefix {
  std::vector<ChunkHeader> headers;
  Status end;
};

// The leading chunks of `keys` whose headers are in the store and check out against `layout`
// and their key, read kChunkHeaderGroup at a time; `names[i]` is the object name of keys[i].
// `end` says where the prefix stops: OK when every key is in it, else the first other chunk's
// error, naming it (NotFound: absent; DataLoss: shorter than a header; InvalidArgument or
// DataLoss from DecodeChunkHeader: another layout or key, or a damaged header). A read the store
// could not make (Unavailable: a cluster not answering) is returned as the error: an outage is
// not a miss. Blocks; memory use is one group's headers.
Result<ChunkHeaderPrefix> ReadChunkHeaderPrefix(Store& store, const KvLayout& layout,
                                                std::span<const ChunkKey> keys,
                                                std::span<const std::string> names);

// Called once per layer, in order, with the layer's slices of all chunks concatenated. An
// error from the sink stops the read and is returned.
using LayerSink = std::function<Status(uint32_t layer, std::span<const std::byte> bytes)>;

// NotFound names the first missing chunk; InvalidArgument a chunk of another layout or key;
// DataLoss a slice that failed its checksum. Blocks; memory use is one layer of all chunks.
Status ReadLayersLayerMajor(Store& store, const KvLayout& layout, std::span<const ChunkKey> keys,
                            LayerRange layers, const LayerSink& sink);

}  // namespace objectcache
