#include "objectcache/chunk_object.h"

#include <algorithm>
#include <cstring>

#include "core/byte_order.h"
#include "core/xxh3.h"

namespace objectcache {
namespace {

constexpr char kMagic[8] = {'O', 'C', 'K', 'V', 'C', 'H', 'N', 'K'};
// Bytes before the per-layer checksums (docs/object-format.md).
constexpr size_t kFixedHeaderBytes = 88;

size_t HeaderBytes(uint32_t layers) { return kFixedHeaderBytes + 8 * size_t{layers} + 8; }

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

std::span<const std::byte> AsByteSpan(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

std::string KeyContext(const ChunkExpectation& expect) {
  return expect.key ? "chunk " + expect.key->ToHex() : std::string("chunk object");
}

}  // namespace

uint64_t LayerChecksum(std::span<const std::byte> slice) {
  return Xxh3(slice.data(), slice.size());
}

ChunkHeader ChunkGeometry(const KvLayout& layout, const ChunkKey& key) {
  ChunkHeader h;
  h.layout = layout;
  h.key = key;
  h.data_offset = kChunkHeaderRegion;
  h.layer_stride = RoundUp(layout.LayerSliceBytes(), kChunkAlignment);
  return h;
}

namespace {

// The header region (kChunkHeaderRegion bytes, zero-padded) for slices with these checksums.
std::string EncodeHeader(const KvLayout& layout, const ChunkKey& key,
                         std::span<const uint64_t> checksums) {
  const ChunkHeader h = ChunkGeometry(layout, key);
  ByteWriter w;
  w.str().reserve(h.data_offset);
  w.Bytes(kMagic, sizeof(kMagic));
  w.U16(kChunkFormatVersion);
  w.U16(static_cast<uint16_t>(HeaderBytes(layout.num_layers)));
  w.U32(0);  // flags
  w.U32(layout.num_layers);
  w.U32(layout.num_kv_heads);
  w.U32(layout.head_dim);
  w.U8(static_cast<uint8_t>(layout.dtype));
  w.U8(static_cast<uint8_t>(layout.kind));
  w.Zeros(2);
  w.U32(layout.tokens_per_chunk);
  w.U32(0);
  w.U64(layout.Fingerprint());
  w.Bytes(key.bytes().data(), ChunkKey::kBytes);
  w.U64(h.data_offset);
  w.U64(h.layer_stride);
  w.U64(layout.LayerSliceBytes());
  for (uint64_t c : checksums) w.U64(c);
  w.U64(XXH3_64bits(w.data(), w.size()));
  w.Zeros(h.data_offset - w.size());
  return std::move(w.str());
}

}  // namespace

Result<std::string> EncodeChunkObject(const KvLayout& layout, const ChunkKey& key,
                                      std::span<const std::byte> kv) {
  OC_RETURN_IF_ERROR(layout.Validate());
  if (kv.size() != layout.ChunkKvBytes()) {
    return InvalidArgumentError("chunk " + key.ToHex() + ": KV is " + std::to_string(kv.size()) +
                                " bytes, layout " + layout.ToString() + " needs " +
                                std::to_string(layout.ChunkKvBytes()));
  }
  const ChunkHeader h = ChunkGeometry(layout, key);
  const uint64_t slice = layout.LayerSliceBytes();
  std::vector<uint64_t> checksums(layout.num_layers);
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    checksums[l] = LayerChecksum(kv.subspan(l * slice, slice));
  }
  std::string out = EncodeHeader(layout, key, checksums);
  out.reserve(h.ObjectBytes());
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    out.append(reinterpret_cast<const char*>(kv.data() + l * slice), slice);
    out.append(h.layer_stride - slice, '\0');
  }
  return out;
}

Status SealChunkObject(const KvLayout& layout, const ChunkKey& key, std::span<std::byte> object) {
  OC_RETURN_IF_ERROR(layout.Validate());
  const ChunkHeader h = ChunkGeometry(layout, key);
  if (object.size() != h.ObjectBytes()) {
    return InvalidArgumentError("chunk " + key.ToHex() + ": object is " +
                                std::to_string(object.size()) + " bytes, layout " +
                                layout.ToString() + " needs " + std::to_string(h.ObjectBytes()));
  }
  std::vector<uint64_t> checksums(layout.num_layers);
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    checksums[l] = LayerChecksum(object.subspan(h.LayerOffset(l), h.LayerSliceBytes()));
  }
  const std::string header = EncodeHeader(layout, key, checksums);
  std::memcpy(object.data(), header.data(), header.size());
  return Status();
}

Result<ChunkHeader> DecodeChunkHeader(std::span<const std::byte> prefix,
                                      const ChunkExpectation& expect) {
  const std::string what = KeyContext(expect);
  auto truncated = [&](const char* part) {
    return DataLossError(what + ": truncated " + part + " (" + std::to_string(prefix.size()) +
                         " bytes)");
  };
  if (prefix.size() < sizeof(kMagic)) return truncated("header");
  if (std::memcmp(prefix.data(), kMagic, sizeof(kMagic)) != 0) {
    return InvalidArgumentError(what + ": not a chunk object (bad magic)");
  }
  ByteReader r(prefix.subspan(sizeof(kMagic)));
  uint16_t version = 0, header_bytes = 0;
  uint32_t flags = 0, reserved32 = 0;
  uint8_t dtype = 0, kind = 0, reserved8[2];
  ChunkHeader h;
  KvLayout& l = h.layout;
  if (!r.U16(&version)) return truncated("header");
  if (version != kChunkFormatVersion) {
    return InvalidArgumentError(what + ": unsupported chunk format version " +
                                std::to_string(version) + " (this build reads version " +
                                std::to_string(kChunkFormatVersion) + ")");
  }
  uint64_t fingerprint = 0, slice = 0;
  ChunkKey::Bytes key_bytes;
  if (!r.U16(&header_bytes) || !r.U32(&flags) || !r.U32(&l.num_layers) || !r.U32(&l.num_kv_heads) ||
      !r.U32(&l.head_dim) || !r.U8(&dtype) || !r.U8(&kind) || !r.Bytes(reserved8, 2) ||
      !r.U32(&l.tokens_per_chunk) || !r.U32(&reserved32) || !r.U64(&fingerprint) ||
      !r.Bytes(key_bytes.data(), key_bytes.size()) || !r.U64(&h.data_offset) ||
      !r.U64(&h.layer_stride) || !r.U64(&slice)) {
    return truncated("header");
  }
  // The layer count decides the header length: bound it before trusting it.
  if (l.num_layers == 0 || l.num_layers > KvLayout::kMaxLayers ||
      header_bytes != HeaderBytes(l.num_layers)) {
    return DataLossError(what + ": corrupt header (layer count " + std::to_string(l.num_layers) +
                         ", header length " + std::to_string(header_bytes) + ")");
  }
  if (prefix.size() < header_bytes) return truncated("header");
  h.layer_checksums.resize(l.num_layers);
  for (uint64_t& c : h.layer_checksums) (void)r.U64(&c);
  uint64_t stored_checksum = 0;
  (void)r.U64(&stored_checksum);
  if (XXH3_64bits(prefix.data(), header_bytes - 8) != stored_checksum) {
    return DataLossError(what + ": header checksum mismatch");
  }
  // The header is intact; from here on a mismatch means a writer we do not understand.
  l.dtype = static_cast<KvDtype>(dtype);
  l.kind = static_cast<KvKind>(kind);
  h.key = ChunkKey(key_bytes);
  if (Status s = l.Validate(); !s.ok()) return s.Annotate(what);
  if (flags != 0 || reserved32 != 0 || reserved8[0] || reserved8[1]) {
    return InvalidArgumentError(what + ": unknown header flags");
  }
  if (fingerprint != l.Fingerprint() || slice != l.LayerSliceBytes() ||
      h.data_offset != kChunkHeaderRegion || h.layer_stride != RoundUp(slice, kChunkAlignment)) {
    return InvalidArgumentError(what + ": inconsistent layout fields in header");
  }
  if (expect.key && h.key != *expect.key) {
    return InvalidArgumentError(what + ": object holds chunk " + h.key.ToHex());
  }
  if (expect.layout && h.layout != *expect.layout) {
    return InvalidArgumentError(what + ": layout is " + l.ToString() + ", expected " +
                                expect.layout->ToString());
  }
  if (expect.object_bytes && *expect.object_bytes != h.ObjectBytes()) {
    return DataLossError(what + ": object is " + std::to_string(*expect.object_bytes) +
                         " bytes, its header says " + std::to_string(h.ObjectBytes()));
  }
  return h;
}

Status VerifyLayerSlice(const ChunkHeader& header, uint32_t layer,
                        std::span<const std::byte> slice) {
  if (layer >= header.layout.num_layers) {
    return InvalidArgumentError("chunk " + header.key.ToHex() + ": layer " + std::to_string(layer) +
                                " out of range");
  }
  if (slice.size() != header.LayerSliceBytes()) {
    return DataLossError("chunk " + header.key.ToHex() + ": layer " + std::to_string(layer) +
                         " is " + std::to_string(slice.size()) + " bytes, expected " +
                         std::to_string(header.LayerSliceBytes()));
  }
  if (LayerChecksum(slice) != header.layer_checksums[layer]) {
    return DataLossError("chunk " + header.key.ToHex() + ": checksum mismatch in layer " +
                         std::to_string(layer));
  }
  return Status();
}

Result<ChunkHeader> VerifyChunkObject(std::span<const std::byte> object,
                                      const ChunkExpectation& expect) {
  ChunkExpectation sized = expect;
  sized.object_bytes = object.size();
  OC_ASSIGN_OR_RETURN(ChunkHeader h, DecodeChunkHeader(object, sized));
  const size_t header_bytes = HeaderBytes(h.layout.num_layers);
  auto all_zero = [](std::span<const std::byte> s) {
    for (std::byte b : s) {
      if (b != std::byte{0}) return false;
    }
    return true;
  };
  if (!all_zero(object.subspan(header_bytes, h.data_offset - header_bytes))) {
    return DataLossError("chunk " + h.key.ToHex() + ": header padding is not zero");
  }
  const uint64_t slice = h.LayerSliceBytes();
  for (uint32_t layer = 0; layer < h.layout.num_layers; ++layer) {
    OC_RETURN_IF_ERROR(VerifyLayerSlice(h, layer, object.subspan(h.LayerOffset(layer), slice)));
    if (!all_zero(object.subspan(h.LayerOffset(layer) + slice, h.layer_stride - slice))) {
      return DataLossError("chunk " + h.key.ToHex() + ": padding after layer " +
                           std::to_string(layer) + " is not zero");
    }
  }
  return h;
}

Result<std::string> DecodeChunkObject(std::span<const std::byte> object,
                                      const ChunkExpectation& expect) {
  OC_ASSIGN_OR_RETURN(ChunkHeader h, VerifyChunkObject(object, expect));
  const uint64_t slice = h.LayerSliceBytes();
  std::string kv;
  kv.reserve(h.layout.ChunkKvBytes());
  for (uint32_t layer = 0; layer < h.layout.num_layers; ++layer) {
    kv.append(reinterpret_cast<const char*>(object.data() + h.LayerOffset(layer)), slice);
  }
  return kv;
}

struct ChunkStreamVerifier::LayerHash {
  Xxh3Stream state;
};

ChunkStreamVerifier::ChunkStreamVerifier(ChunkExpectation expect)
    : expect_(expect), hash_(std::make_unique<LayerHash>()) {
  // Keep our own copies: the caller's pointees need not outlive this call.
  if (expect_.layout) {
    layout_copy_ = *expect_.layout;
    expect_.layout = &layout_copy_;
  }
  if (expect_.key) {
    key_copy_ = *expect_.key;
    expect_.key = &key_copy_;
  }
  hash_->state.Reset();
}

ChunkStreamVerifier::~ChunkStreamVerifier() = default;

Status ChunkStreamVerifier::Feed(std::span<const std::byte> bytes) {
  if (!header_) {
    const size_t take = std::min<size_t>(kChunkHeaderRegion - header_bytes_.size(), bytes.size());
    header_bytes_.append(reinterpret_cast<const char*>(bytes.data()), take);
    offset_ += take;
    bytes = bytes.subspan(take);
    if (header_bytes_.size() < kChunkHeaderRegion) {
      // Reject a foreign object as soon as its magic is in.
      if (header_bytes_.size() >= 8 && std::memcmp(header_bytes_.data(), kMagic, 8) != 0) {
        return InvalidArgumentError("chunk object: not a chunk object (bad magic)");
      }
      return Status();
    }
    ChunkExpectation no_size = expect_;
    no_size.object_bytes.reset();
    OC_ASSIGN_OR_RETURN(ChunkHeader h, DecodeChunkHeader(AsByteSpan(header_bytes_), no_size));
    if (expect_.object_bytes && *expect_.object_bytes != h.ObjectBytes()) {
      return DataLossError("chunk " + h.key.ToHex() + ": object is " +
                           std::to_string(*expect_.object_bytes) + " bytes, its header says " +
                           std::to_string(h.ObjectBytes()));
    }
    const size_t header_len = HeaderBytes(h.layout.num_layers);
    for (size_t i = header_len; i < kChunkHeaderRegion; ++i) {
      if (header_bytes_[i] != 0)
        return DataLossError("chunk " + h.key.ToHex() + ": header padding is not zero");
    }
    header_ = std::move(h);
  }
  return FeedBody(bytes);
}

Status ChunkStreamVerifier::FeedBody(std::span<const std::byte> bytes) {
  const ChunkHeader& h = *header_;
  const uint64_t slice = h.LayerSliceBytes();
  while (!bytes.empty()) {
    if (offset_ >= h.ObjectBytes()) {
      return DataLossError("chunk " + h.key.ToHex() + ": object is longer than its header says");
    }
    const uint64_t rel = offset_ - h.data_offset;
    const uint32_t layer = static_cast<uint32_t>(rel / h.layer_stride);
    const uint64_t in_layer = rel % h.layer_stride;
    const size_t take =
        static_cast<size_t>(std::min<uint64_t>(bytes.size(), h.layer_stride - in_layer));
    std::span<const std::byte> part = bytes.first(take);
    if (in_layer < slice) {
      const size_t data = static_cast<size_t>(std::min<uint64_t>(take, slice - in_layer));
      hash_->state.Update(part.data(), data);
      if (in_layer + data == slice) {
        if (hash_->state.Digest() != h.layer_checksums[layer]) {
          return DataLossError("chunk " + h.key.ToHex() + ": checksum mismatch in layer " +
                               std::to_string(layer));
        }
        hash_->state.Reset();
      }
      part = part.subspan(data);
    }
    for (std::byte b : part) {
      if (b != std::byte{0}) {
        return DataLossError("chunk " + h.key.ToHex() + ": padding after layer " +
                             std::to_string(layer) + " is not zero");
      }
    }
    offset_ += take;
    bytes = bytes.subspan(take);
  }
  return Status();
}

Status ChunkStreamVerifier::Finish() {
  if (!header_) {
    return DataLossError("chunk object: truncated header (" + std::to_string(offset_) + " bytes)");
  }
  if (offset_ != header_->ObjectBytes()) {
    return DataLossError("chunk " + header_->key.ToHex() + ": object is " +
                         std::to_string(offset_) + " bytes, its header says " +
                         std::to_string(header_->ObjectBytes()));
  }
  return Status();
}

}  // namespace objectcache
