#include "objectcache/layer_reader.h"

#include <algorithm>
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

Result<ChunkHeaderPrefix> ReadChunkHeaderPrefix(Store& store, const KvLayout& layout,
                                                std::span<const ChunkKey> keys,
                                                std::span<const std::string> names) {
  if (names.size() != keys.size()) {
    return InvalidArgumentError("ReadChunkHeaderPrefix: " + std::to_string(keys.size()) +
                                " keys, " + std::to_string(names.size()) + " names");
  }
  ChunkHeaderPrefix out;
  const size_t count = keys.size();
  std::string buf(std::min(kChunkHeaderGroup, count) * kChunkHeaderRegion, '\0');
  std::vector<RangeRead> reads;
  for (size_t start = 0; start < count; start += kChunkHeaderGroup) {
    const size_t n = std::min(kChunkHeaderGroup, count - start);
    reads.assign(n, RangeRead{});
    for (size_t i = 0; i < n; ++i) {
      reads[i] = {.key = names[start + i],
                  .offset = 0,
                  .dest = AsWritableBytes(buf).subspan(i * kChunkHeaderRegion, kChunkHeaderRegion)};
    }
    OC_RETURN_IF_ERROR(store.RetrieveRanges(reads));
    for (size_t i = 0; i < n; ++i) {
      const size_t at = start + i;
      Status why = reads[i].status;
      if (why.code() == StatusCode::kOutOfRange) {
        why = DataLossError("the object is shorter than a chunk header");
      }
      if (why.ok()) {
        ChunkExpectation expect{.layout = &layout, .key = &keys[at]};
        Result<ChunkHeader> h = DecodeChunkHeader(reads[i].dest, expect);
        if (h) {
          out.headers.push_back(std::move(*h));
          continue;
        }
        why = h.error();
      }
      if (why.code() == StatusCode::kUnavailable) return why;
      out.end = why.Annotate("chunk " + names[at] + " (#" + std::to_string(at) + ")");
      return out;
    }
  }
  return out;
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
  OC_ASSIGN_OR_RETURN(ChunkHeaderPrefix prefix, ReadChunkHeaderPrefix(store, layout, keys, names));
  if (!prefix.end.ok()) return prefix.end;
  const std::vector<ChunkHeader>& parsed = prefix.headers;

  std::vector<RangeRead> reads(n);
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
