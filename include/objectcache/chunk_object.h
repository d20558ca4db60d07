// The chunk object: one chunk's KV for every layer, as stored under its key.
//
//   [ header, padded to 4096 bytes ][ layer 0 slice ][ pad ][ layer 1 slice ][ pad ] ...
//
// The header names the format version, the layout, the key and one checksum per layer; each
// layer slice starts on a 4 KiB boundary, so any layer of any chunk is one byte range
// (LayerOffset, LayerSliceBytes) that a ranged read, O_DIRECT or RDMA can fetch alone and
// verify alone. docs/object-format.md defines every byte.
//
// Nothing here trusts its input: every decoder checks sizes, magic, version, the header
// checksum and the layer checksums, and returns InvalidArgument (not a chunk object of a
// version and layout we accept) or DataLoss (a chunk object whose bytes are damaged or cut
// short). None of them crashes or hands back bytes that failed a check.
//
// All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "objectcache/chunk_key.h"
#include "objectcache/kv_layout.h"
#include "objectcache/status.h"

namespace objectcache {

inline constexpr uint16_t kChunkFormatVersion = 1;
// Size of the header region, and the alignment of every layer slice.
inline constexpr uint64_t kChunkAlignment = 4096;
inline constexpr uint64_t kChunkHeaderRegion = kChunkAlignment;

struct ChunkHeader {
  KvLayout layout;
  ChunkKey key;
  uint64_t data_offset = kChunkHeaderRegion;
  uint64_t layer_stride = 0;              // LayerSliceBytes rounded up to kChunkAlignment
  std::vector<uint64_t> layer_checksums;  // XXH3-64 of each layer slice

  uint64_t LayerSliceBytes() const { return layout.LayerSliceBytes(); }
  uint64_t LayerOffset(uint32_t layer) const { return data_offset + layer_stride * layer; }
  uint64_t ObjectBytes() const { return data_offset + layer_stride * layout.num_layers; }
};

// Object size and layer placement for `layout`, before any object exists.
ChunkHeader ChunkGeometry(const KvLayout& layout, const ChunkKey& key);

// Builds a chunk object from the chunk's raw KV, layer-major: layer 0's slice, then layer 1's,
// each LayerSliceBytes long. InvalidArgument if `kv` is not exactly ChunkKvBytes long or the
// layout is invalid.
Result<std::string> EncodeChunkObject(const KvLayout& layout, const ChunkKey& key,
                                      std::span<const std::byte> kv);

// Writes the header into `object`: ObjectBytes long, each layer slice already at its
// LayerOffset and the padding zero (how an engine's layers are assembled in place as prefill
// computes them). The result is the object EncodeChunkObject gives for the same KV.
// InvalidArgument for an invalid layout or another size.
Status SealChunkObject(const KvLayout& layout, const ChunkKey& key, std::span<std::byte> object);

// What the caller expects the object to be; unset fields are not checked.
struct ChunkExpectation {
  const KvLayout* layout = nullptr;
  const ChunkKey* key = nullptr;
  std::optional<uint64_t> object_bytes;  // the stored object's size, when known
};

// Decodes and validates the header from the first bytes of an object (the whole object or at
// least its first kChunkHeaderRegion bytes; fewer is fine when the object is that short).
Result<ChunkHeader> DecodeChunkHeader(std::span<const std::byte> prefix,
                                      const ChunkExpectation& expect = {});

// DataLoss unless `slice` is exactly layer `layer`'s slice with the checksum in `header`.
Status VerifyLayerSlice(const ChunkHeader& header, uint32_t layer,
                        std::span<const std::byte> slice);

// Validates a whole object (header, size, every layer checksum, zero padding) and returns its
// header.
Result<ChunkHeader> VerifyChunkObject(std::span<const std::byte> object,
                                      const ChunkExpectation& expect = {});

// The raw layer-major KV of a whole, verified object (the inverse of EncodeChunkObject).
Result<std::string> DecodeChunkObject(std::span<const std::byte> object,
                                      const ChunkExpectation& expect = {});

// Checks a chunk object as its bytes stream past (an upload), without holding it: the header
// when its 4096 bytes are in, each layer slice against its checksum as it completes, zero
// padding, and the exact size at Finish. Errors as DecodeChunkHeader and VerifyLayerSlice.
class ChunkStreamVerifier {
 public:
  explicit ChunkStreamVerifier(ChunkExpectation expect);
  ~ChunkStreamVerifier();
  ChunkStreamVerifier(const ChunkStreamVerifier&) = delete;
  ChunkStreamVerifier& operator=(const ChunkStreamVerifier&) = delete;

  Status Feed(std::span<const std::byte> bytes);
  Status Finish();

 private:
  Status FeedBody(std::span<const std::byte> bytes);

  ChunkExpectation expect_;
  KvLayout layout_copy_;
  ChunkKey key_copy_;
  std::string header_bytes_;
  std::optional<ChunkHeader> header_;
  uint64_t offset_ = 0;  // bytes fed so far
  struct LayerHash;
  std::unique_ptr<LayerHash> hash_;
};

// XXH3-64, seed 0: the layer checksum.
uint64_t LayerChecksum(std::span<const std::byte> slice);

}  // namespace objectcache
