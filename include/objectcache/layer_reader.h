// Reading chunk layers layer-major from any store.
//
// Given an ordered list of chunk keys and a layer range [first, last), produces for each layer
// in order the concatenation of that layer's slice of every chunk, in list order: exactly the
// bytes an engine's layerwise prefill consumes. Every slice is checked against its chunk's
// header (layout, key, layer checksum) before it is handed over; nothing unchecked leaves.
//
// This is the store-side building block of layerwise retrieval; `objectcache kv get-layers`
// is a thin wrapper. Thread-compatible: one call per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

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

// Called once per layer, in order, with the layer's slices of all chunks concatenated. An
// error from the sink stops the read and is returned.
using LayerSink = std::function<Status(uint32_t layer, std::span<const std::byte> bytes)>;

// NotFound names the first missing chunk; InvalidArgument a chunk of another layout or key;
// DataLoss a slice that failed its checksum. Blocks; memory use is one layer of all chunks.
Status ReadLayersLayerMajor(Store& store, const KvLayout& layout, std::span<const ChunkKey> keys,
                            LayerRange layers, const LayerSink& sink);

}  // namespace objectcache
