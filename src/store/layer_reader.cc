#include "objectcache/layer_reader.h"

#include <charconv>
#include <string>

#include "objectcache/chunk_object.h"

namespace objectcache {

Result<LayerRange> LayerRange::Parse(std::string_view text, uint32_t num_layers) {
  size_t colon = text.find(':');
  LayerRange r;
  auto parse = [](std::string_view s, uint32_t* out) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return ec == std::errc() && end == s.data() + s.size() && !s.empty();
  };
  if (colon == std::string_view::npos || !parse(text.substr(0, colon), &r.first) ||
      !parse(text.substr(colon + 1), &r.last)) {
    return InvalidArgumentError("layer range '" + std::string(text) +
                                "' is not A:B (A inclusive, B exclusive)");
  }
  if (r.first >= r.last || r.last > num_layers) {
    return InvalidArgumentError("layer range " + std::string(text) +
                                " is empty or outside 0:" + std::to_string(num_layers));
  }
  return r;
}

Status ReadLayersLayerMajor(Store& store, const KvLayout& layout, std::span<const ChunkKey> keys,
                            LayerRange layers, const LayerSink& sink) {
  OC_RETURN_IF_ERROR(layout.Validate());
  if (layers.first >= layers.last || layers.last > layout.num_layers) {
    return InvalidArgumentError("layer range " + std::to_string(layers.first) + ":" +
                                std::to_string(layers.last) +
                                " is empty or outside 0:" + std::to_string(layout.num_layers));
  }
  const size_t n = keys.size();
  std::vector<std::string> names(n);
  for (size_t i = 0; i < n; ++i) names[i] = keys[i].ToHex();

  // All headers in one call.
  std::string headers(n * kChunkHeaderRegion, '\0');
  std::vector<RangeRead> reads(n);
  for (size_t i = 0; i < n; ++i) {
    reads[i] = {
        .key = names[i],
        .offset = 0,
        .dest = AsWritableBytes(headers).subspan(i * kChunkHeaderRegion, kChunkHeaderRegion)};
  }
  OC_RETURN_IF_ERROR(store.RetrieveRanges(reads));
  std::vector<ChunkHeader> parsed(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string what = "chunk " + names[i] + " (#" + std::to_string(i) + ")";
    if (reads[i].status.code() == StatusCode::kOutOfRange) {
      return DataLossError(what + ": object is shorter than a chunk header");
    }
    if (!reads[i].status.ok()) return reads[i].status.Annotate(what);
    ChunkExpectation expect{.layout = &layout, .key = &keys[i]};
    Result<ChunkHeader> h = DecodeChunkHeader(reads[i].dest, expect);
    if (!h.has_value()) return h.error().Annotate("#" + std::to_string(i));
    parsed[i] = std::move(*h);
  }

  const uint64_t slice = layout.LayerSliceBytes();
  std::string buf(n * slice, '\0');
  for (uint32_t layer = layers.first; layer < layers.last; ++layer) {
    for (size_t i = 0; i < n; ++i) {
      reads[i] = {.key = names[i],
                  .offset = parsed[i].LayerOffset(layer),
                  .dest = AsWritableBytes(buf).subspan(i * slice, slice)};
    }
    OC_RETURN_IF_ERROR(store.RetrieveRanges(reads));
    for (size_t i = 0; i < n; ++i) {
      const std::string what = "reading layer " + std::to_string(layer) + " of chunk " + names[i];
      if (reads[i].status.code() == StatusCode::kOutOfRange) {
        return DataLossError(what + ": object is shorter than its header says");
      }
      if (!reads[i].status.ok()) return reads[i].status.Annotate(what);
      OC_RETURN_IF_ERROR(VerifyLayerSlice(parsed[i], layer, reads[i].dest));
    }
    OC_RETURN_IF_ERROR(sink(layer, AsBytes(buf)));
  }
  return Status();
}

}  // namespace objectcache
