// Decoding a layerwise retrieval response (docs/wire-format.md) as its bytes arrive.
//
// LayerStreamDecoder is a push parser: feed it the response body in pieces of any size; it
// copies each layer's payload into the region the caller gave for that layer, checks it (version
// 1: the frame's checksum; version 2: each slice against its writer's checksum, while the bytes
// are still in cache) and the frame's status, and only then reports the layer ready (or failed). A
// layer is never reported ready with bytes that failed a check. Not thread-safe: one feeder.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "objectcache/status.h"
#include "wire/layerwise_wire.h"

namespace objectcache::client {

// The response header (docs/wire-format.md), as src/wire decodes it.
using LayerStreamHeader = wire::ResponseHeader;

// Where a response's bytes go: one region per layer of the range, and where chunk j's slice
// lies in each region (chunk_offsets[j]; empty: j x slice_bytes, the chunks back to back).
// Or, when `slot` is set, anywhere: slot(i, j) is the first byte of chunk j's slice of the
// range's layer i (the caller vouches for slice_bytes of room there).
struct LayerPlacement {
  std::vector<std::span<std::byte>> regions;
  std::vector<uint64_t> chunk_offsets;
  std::function<std::byte*(uint32_t layer_index, uint64_t chunk)> slot;
  // How errors name chunk j of the response (its key); unset: "chunk j".
  std::function<std::string(uint64_t chunk)> chunk_name;
};

class LayerStreamDecoder {
 public:
  // Called once the response header is in; returns where each layer's slices go, or an error
  // to stop.
  using RegionsFn = std::function<Result<LayerPlacement>(const LayerStreamHeader&)>;
  // Called for each layer in order: OK when its bytes are in its region and verified, the
  // failure otherwise (then no later layer follows).
  using LayerFn = std::function<void(uint32_t layer, const Status& status)>;

  LayerStreamDecoder(RegionsFn regions, LayerFn on_layer);
  ~LayerStreamDecoder();

  // Consumes bytes of the response body. An error is final.
  Status Feed(std::span<const std::byte> bytes);
  // The same, for a reader that can put bytes where they belong: NextBuffer() is the room for
  // the next bytes of the body (never empty): the payload's own place in its layer's region,
  // or the decoder's buffer for the records around it, exactly as long as the record; after
  // n <= its size bytes landed there, Commit(n). Payload bytes are then verified in place and
  // never copied. Mixes with Feed.
  std::span<std::byte> NextBuffer();
  Status Commit(size_t n);
  // After the last byte: OK only if every layer arrived verified.
  Status Finish();

  const LayerStreamHeader& header() const { return header_; }

 private:
  enum class State {
    kHeader,
    kFrameHeader,
    kFrameRest,
    kChecksums,
    kPayload,
    kTrailer,
    kErrorHeader,
    kErrorMessage,
    kDone
  };
  Status Fail(Status s);
  uint64_t ChunkOffset(uint64_t chunk) const;
  // Where hit `chunk`'s slice of the current layer goes.
  std::byte* SliceAt(uint64_t chunk) const;
  // Where the current payload byte goes.
  std::byte* PayloadAt() const;
  // The room from PayloadAt() on that the next payload bytes fill in place.
  std::span<std::byte> PayloadRoom() const;
  // `n` payload bytes landed at PayloadAt() (through PayloadRoom() or one slice's rest): checks
  // them and moves on.
  void PayloadLanded(size_t n);

  static constexpr uint64_t kMaxPayloadRead = 512 << 10;
  // The size the record being assembled in pending_ will have (kPayload: none).
  size_t RecordBytes() const;

  RegionsFn regions_fn_;
  LayerFn on_layer_;
  State state_ = State::kHeader;
  std::string pending_;           // bytes of a fixed-size record being assembled
  std::string staging_;           // NextBuffer's room for bytes that are not payload
  bool next_is_payload_ = false;  // what the last NextBuffer handed out
  LayerStreamHeader header_;
  LayerPlacement placement_;
  uint32_t layers_done_ = 0;
  uint32_t frame_layer_ = 0;
  uint64_t payload_left_ = 0, payload_pos_ = 0;
  struct Hash;
  std::unique_ptr<Hash> hash_;  // the running XXH3-64 of the current frame (v1) or slice (v2)
  std::vector<uint64_t> slice_checksums_;  // v2: the writers' checksums of the current frame
  // v2: the current frame's first slice that failed its checksum. DataLoss at the trailer,
  // unless the trailer says the server failed the frame (it sends zeros for the rest of it).
  Status slice_mismatch_;
  uint32_t error_code_ = 0, error_len_ = 0;
  std::string error_message_;
  Status failure_;         // final: the stream cannot go on
  Status server_failure_;  // a frame the server marked failed; its error record follows
};

}  // namespace objectcache::client
