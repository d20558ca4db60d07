#include "client/layer_stream.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t: the running frame checksum
#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "core/byte_order.h"
#include "objectcache/store.h"

namespace objectcache::client {
namespace {

constexpr char kResponseMagic[8] = {'O', 'C', 'L', 'W', 'R', 'S', 'P', '1'};
constexpr uint32_t kFrameMagic = 0x464c434f;
constexpr uint32_t kErrorMagic = 0x454c434f;
constexpr size_t kHeaderBytes = 40, kFrameHeaderBytes = 24, kTrailerBytes = 16, kErrorBytes = 16;
constexpr uint32_t kMaxErrorMessage = 64 << 10;

Status Malformed(const std::string& why) { return DataLossError("layerwise response: " + why); }

}  // namespace

struct LayerStreamDecoder::Hash {
  XXH3_state_t state;
};

LayerStreamDecoder::LayerStreamDecoder(RegionsFn regions, LayerFn on_layer)
    : regions_fn_(std::move(regions)),
      on_layer_(std::move(on_layer)),
      hash_(std::make_unique<Hash>()) {}

LayerStreamDecoder::~LayerStreamDecoder() = default;

uint64_t LayerStreamDecoder::ChunkOffset(uint64_t chunk) const {
  return placement_.chunk_offsets.empty() ? chunk * header_.slice_bytes
                                          : placement_.chunk_offsets[chunk];
}

Status LayerStreamDecoder::Fail(Status s) {
  if (failure_.ok()) {
    failure_ = s;
    // The layer in flight, if any, is reported failed; later ones never come.
    if ((state_ == State::kPayload || state_ == State::kTrailer) && server_failure_.ok()) {
      on_layer_(frame_layer_, s);
    }
  }
  state_ = State::kDone;
  return s;
}

Status LayerStreamDecoder::Feed(std::span<const std::byte> bytes) {
  if (!failure_.ok()) return failure_;
  // Appends to pending_ until it holds `n` bytes; true when complete.
  auto take = [&](size_t n) {
    const size_t k = std::min(n - pending_.size(), bytes.size());
    pending_.append(reinterpret_cast<const char*>(bytes.data()), k);
    bytes = bytes.subspan(k);
    return pending_.size() == n;
  };
  while (!bytes.empty()) {
    switch (state_) {
      case State::kHeader: {
        if (!take(kHeaderBytes)) break;
        if (std::memcmp(pending_.data(), kResponseMagic, 8) != 0) {
          return Fail(Malformed("bad magic (not a layerwise response)"));
        }
        ByteReader r(AsBytes(pending_).subspan(8));
        uint16_t version = 0, flags = 0;
        uint32_t reserved = 0;
        (void)r.U16(&version);
        (void)r.U16(&flags);
        (void)r.U32(&header_.hits);
        (void)r.U32(&header_.first_layer);
        (void)r.U32(&header_.layer_count);
        (void)r.U64(&header_.slice_bytes);
        (void)r.U32(&header_.keys);
        (void)r.U32(&reserved);
        if (version != 1)
          return Fail(
              InvalidArgumentError("layerwise response version " + std::to_string(version)));
        if (header_.hits > header_.keys || header_.slice_bytes == 0 || header_.layer_count == 0) {
          return Fail(Malformed("inconsistent header"));
        }
        pending_.clear();
        Result<LayerPlacement> placement = regions_fn_(header_);
        if (!placement) return Fail(placement.error());
        placement_ = std::move(*placement);
        if (placement_.slot) {
          state_ = State::kFrameHeader;
          break;
        }
        if (placement_.regions.size() != header_.layer_count)
          return Fail(InvalidArgumentError("one region per layer is needed"));
        if (!placement_.chunk_offsets.empty() && placement_.chunk_offsets.size() < header_.hits)
          return Fail(InvalidArgumentError("one offset per hit chunk is needed"));
        for (const auto& region : placement_.regions) {
          for (uint32_t j = 0; j < header_.hits; ++j) {
            if (ChunkOffset(j) + header_.slice_bytes > region.size()) {
              return Fail(InvalidArgumentError("a chunk's slice falls outside its layer region"));
            }
          }
        }
        state_ = State::kFrameHeader;
        break;
      }
      case State::kFrameHeader: {
        // The magic says which record comes: a frame, or the error record after a failure.
        if (!take(4)) break;
        uint32_t magic = 0;
        ByteReader peek(AsBytes(pending_));
        (void)peek.U32(&magic);
        if (magic == kErrorMagic) {
          state_ = State::kErrorHeader;
        } else if (magic == kFrameMagic && server_failure_.ok()) {
          state_ = State::kFrameRest;
        } else {
          return Fail(Malformed("expected a frame or an error record"));
        }
        break;
      }
      case State::kFrameRest: {
        if (!take(kFrameHeaderBytes)) break;
        ByteReader r(AsBytes(pending_).subspan(4));
        uint32_t chunks = 0, reserved = 0;
        (void)r.U32(&frame_layer_);
        (void)r.U32(&chunks);
        (void)r.U32(&reserved);
        (void)r.U64(&payload_left_);
        const uint32_t expected = header_.first_layer + layers_done_;
        if (frame_layer_ != expected || chunks != header_.hits ||
            payload_left_ != header_.hits * header_.slice_bytes) {
          return Fail(
              Malformed("bad frame header (expected layer " + std::to_string(expected) + ")"));
        }
        pending_.clear();
        payload_pos_ = 0;
        XXH3_64bits_reset(&hash_->state);
        state_ = payload_left_ > 0 ? State::kPayload : State::kTrailer;
        break;
      }
      case State::kPayload: {
        // Up to the end of the current chunk's slice.
        const uint64_t chunk = payload_pos_ / header_.slice_bytes;
        const uint64_t within = payload_pos_ % header_.slice_bytes;
        const size_t n = static_cast<size_t>(
            std::min<uint64_t>({payload_left_, bytes.size(), header_.slice_bytes - within}));
        std::byte* dest = placement_.slot
                              ? placement_.slot(layers_done_, chunk)
                              : placement_.regions[layers_done_].data() + ChunkOffset(chunk);
        std::memcpy(dest + within, bytes.data(), n);
        XXH3_64bits_update(&hash_->state, bytes.data(), n);
        payload_pos_ += n;
        payload_left_ -= n;
        bytes = bytes.subspan(n);
        if (payload_left_ == 0) state_ = State::kTrailer;
        break;
      }
      case State::kTrailer: {
        if (!take(kTrailerBytes)) break;
        ByteReader r(AsBytes(pending_));
        uint32_t status = 0, reserved = 0;
        uint64_t checksum = 0;
        (void)r.U32(&status);
        (void)r.U32(&reserved);
        (void)r.U64(&checksum);
        pending_.clear();
        if (status != 0) {
          // The server could not deliver this layer; its error record follows.
          server_failure_ =
              Status(static_cast<StatusCode>(status),
                     "layer " + std::to_string(frame_layer_) + " failed on the server");
          on_layer_(frame_layer_, server_failure_);
          state_ = State::kFrameHeader;
          break;
        }
        if (XXH3_64bits_digest(&hash_->state) != checksum) {
          return Fail(
              DataLossError("layer " + std::to_string(frame_layer_) + ": frame checksum mismatch"));
        }
        on_layer_(frame_layer_, Status());
        layers_done_++;
        state_ = layers_done_ == header_.layer_count ? State::kDone : State::kFrameHeader;
        break;
      }
      case State::kErrorHeader: {
        if (!take(kErrorBytes)) break;  // the magic is in already
        ByteReader r(AsBytes(pending_).subspan(4));
        uint32_t reserved = 0;
        (void)r.U32(&error_code_);
        (void)r.U32(&error_len_);
        (void)r.U32(&reserved);
        pending_.clear();
        if (error_len_ > kMaxErrorMessage) return Fail(Malformed("error record too long"));
        state_ = State::kErrorMessage;
        if (error_len_ == 0) {
          failure_ = Status(
              error_code_ == 0 ? StatusCode::kInternal : static_cast<StatusCode>(error_code_),
              "server error");
          state_ = State::kDone;
          return failure_;
        }
        break;
      }
      case State::kErrorMessage: {
        if (error_len_ > 0 && !take(error_len_)) break;
        const StatusCode code =
            error_code_ == 0 ? StatusCode::kInternal : static_cast<StatusCode>(error_code_);
        failure_ = Status(code, "server: " + pending_);
        pending_.clear();
        state_ = State::kDone;
        return failure_;
      }
      case State::kDone:
        return Fail(Malformed("bytes after the end"));
    }
  }
  return failure_;
}

Status LayerStreamDecoder::Finish() {
  if (!failure_.ok()) return failure_;
  if (!server_failure_.ok()) return Fail(server_failure_);
  if (state_ != State::kDone || layers_done_ != header_.layer_count) {
    return Fail(Malformed("response ended after " + std::to_string(layers_done_) + " of " +
                          std::to_string(header_.layer_count) + " layers"));
  }
  return Status();
}

}  // namespace objectcache::client
