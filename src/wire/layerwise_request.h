// The layerwise request (docs/wire-format.md, "Layerwise retrieval"): the JSON body of
// POST /BUCKET?layerwise, encoded by the client and `objectcache fetch` and decoded by the
// server, here only.
//
//   {"version": 1|2, "keys": ["<32 hex>", ...], "layers": [first, last],
//    "layout": "<preset>" | {layout JSON}, "compute_seconds_per_layer": s}
//
// "layout" and "compute_seconds_per_layer" are optional (a bucket bound to a layout needs no
// layout; 0 or absent: the requester did not say).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "objectcache/chunk_key.h"
#include "objectcache/kv_layout.h"
#include "objectcache/status.h"

namespace objectcache::wire {

struct LayerwiseRequestBody {
  uint16_t version = 1;  // of the response: kLayerwiseV1 or kLayerwiseV2 (layerwise_wire.h)
  std::vector<ChunkKey> keys;
  uint32_t first = 0, last = 0;  // layers [first, last)
  std::optional<ModelPreset> model;
  double compute_seconds_per_layer = 0;  // the requester's, for the scheduler; 0: not said
};

std::string EncodeLayerwiseRequest(const LayerwiseRequestBody& request);

// InvalidArgument naming the field unless `body` is a request of version 1 or 2 with 1 to
// `max_keys` chunk keys, layers within 32 bits, a known preset or a valid layout, and a compute
// time in (0, 3600) seconds. The JSON is parsed within bounds (bounded_json.h) before any tree
// is built. Whether the layers lie inside the layout is the caller's to check.
Result<LayerwiseRequestBody> DecodeLayerwiseRequest(std::string_view body, size_t max_keys);

}  // namespace objectcache::wire
