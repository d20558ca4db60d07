#include "client/layer_stream.h"

#include <algorithm>
#include <cstring>

#include "core/xxh3.h"
#include "objectcache/store.h"

namespace objectcache::client {
namespace {

Status Malformed(const std::string& why) { return DataLossError("layerwise response: " + why); }

}  // namespace

struct LayerStreamDecoder::Hash {
  Xxh3Stream state;
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
    if ((state_ == State::kChecksums || state_ == State::kPayload || state_ == State::kTrailer) &&
        server_failure_.ok()) {
      on_layer_(frame_layer_, s);
    }
  }
  state_ = State::kDone;
  return s;
}

std::byte* LayerStreamDecoder::SliceAt(uint64_t chunk) const {
  return placement_.slot ? placement_.slot(layers_done_, chunk)
                         : placement_.regions[layers_done_].data() + ChunkOffset(chunk);
}

std::byte* LayerStreamDecoder::PayloadAt() const {
  return SliceAt(payload_pos_ / header_.slice_bytes) + payload_pos_ % header_.slice_bytes;
}

std::span<std::byte> LayerStreamDecoder::PayloadRoom() const {
  const uint64_t slice = header_.slice_bytes;
  std::byte* const at = PayloadAt();
  uint64_t room = std::min<uint64_t>(payload_left_, slice - payload_pos_ % slice);
  // The slices after it that lie right after it in memory join it, up to kMaxPayloadRead: one
  // read then fills several (a read per 64 KiB slice costs the receiver as much again as the
  // copy), and they are still in cache when they are verified.
  for (uint64_t next = payload_pos_ / slice + 1; room < kMaxPayloadRead && room < payload_left_;
       ++next) {
    if (SliceAt(next) != at + room) break;
    room += std::min<uint64_t>(slice, payload_left_ - room);
  }
  return {at, static_cast<size_t>(std::min<uint64_t>(room, kMaxPayloadRead))};
}

void LayerStreamDecoder::PayloadLanded(size_t n) {
  const uint64_t slice = header_.slice_bytes;
  while (n > 0) {
    const uint64_t chunk = payload_pos_ / slice;
    const uint64_t within = payload_pos_ % slice;
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, slice - within));
    const std::byte* landed = PayloadAt();
    if (header_.version == wire::kLayerwiseV2) {
      // The slice is checked where it landed, while the bytes are still in cache.
      if (within == 0) hash_->state.Reset();
      hash_->state.Update(landed, k);
      if (within + k == slice && slice_mismatch_.ok() &&
          hash_->state.Digest() != slice_checksums_[chunk]) {
        slice_mismatch_ =
            DataLossError("layer " + std::to_string(frame_layer_) + ": " +
                          (placement_.chunk_name ? "chunk " + placement_.chunk_name(chunk)
                                                 : "chunk " + std::to_string(chunk)) +
                          ": slice checksum mismatch (damaged on disk or in flight)");
      }
    } else {
      hash_->state.Update(landed, k);
    }
    payload_pos_ += k;
    payload_left_ -= k;
    n -= k;
  }
  if (payload_left_ == 0) state_ = State::kTrailer;
}

size_t LayerStreamDecoder::RecordBytes() const {
  switch (state_) {
    case State::kHeader:
      return wire::kResponseHeaderBytes;
    case State::kFrameHeader:
      return wire::kRecordMagicBytes;
    case State::kFrameRest:
      return wire::kFrameHeaderBytes;
    case State::kChecksums:
      return static_cast<size_t>(header_.hits) * 8;
    case State::kTrailer:
      return wire::kFrameTrailerBytes;
    case State::kErrorHeader:
      return wire::kErrorRecordBytes;
    case State::kErrorMessage:
      return error_len_;
    case State::kPayload:
    case State::kDone:
      break;
  }
  return 0;
}

std::span<std::byte> LayerStreamDecoder::NextBuffer() {
  next_is_payload_ = failure_.ok() && state_ == State::kPayload;
  if (next_is_payload_) return PayloadRoom();
  // Exactly the rest of the record, so that the payload after it lands in place; after the end
  // (or a failure) any room: Feed then says what is wrong with more bytes.
  const size_t record = RecordBytes();
  const size_t want = record > pending_.size() ? record - pending_.size() : 4096;
  staging_.resize(want);
  return std::as_writable_bytes(std::span(staging_));
}

Status LayerStreamDecoder::Commit(size_t n) {
  if (!next_is_payload_) return Feed(AsBytes(std::string_view(staging_).substr(0, n)));
  if (!failure_.ok()) return failure_;
  PayloadLanded(n);
  return Status();
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
        if (!take(wire::kResponseHeaderBytes)) break;
        Result<wire::ResponseHeader> header = wire::ParseResponseHeader(AsBytes(pending_));
        if (!header) return Fail(header.error());
        header_ = *header;
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
        if (!take(wire::kRecordMagicBytes)) break;
        const wire::RecordKind kind = wire::KindOfRecord(AsBytes(pending_));
        if (kind == wire::RecordKind::kError) {
          state_ = State::kErrorHeader;
        } else if (kind == wire::RecordKind::kFrame && server_failure_.ok()) {
          state_ = State::kFrameRest;
        } else {
          return Fail(Malformed("expected a frame or an error record"));
        }
        break;
      }
      case State::kFrameRest: {
        if (!take(wire::kFrameHeaderBytes)) break;
        Result<wire::FrameHeader> frame = wire::ParseFrameHeader(AsBytes(pending_));
        if (!frame) return Fail(frame.error());
        frame_layer_ = frame->layer;
        payload_left_ = frame->payload_bytes;
        const uint32_t expected = header_.first_layer + layers_done_;
        if (frame_layer_ != expected || frame->chunks != header_.hits ||
            payload_left_ != header_.hits * header_.slice_bytes) {
          return Fail(
              Malformed("bad frame header (expected layer " + std::to_string(expected) + ")"));
        }
        pending_.clear();
        payload_pos_ = 0;
        slice_mismatch_ = Status();
        hash_->state.Reset();
        state_ = payload_left_ == 0                      ? State::kTrailer
                 : header_.version == wire::kLayerwiseV2 ? State::kChecksums
                                                         : State::kPayload;
        break;
      }
      case State::kChecksums: {
        // hits x 8 bytes: at most 64 KiB for the 8192 keys a request may name.
        if (!take(static_cast<size_t>(header_.hits) * 8)) break;
        Result<std::vector<uint64_t>> sums =
            wire::ParseSliceChecksums(AsBytes(pending_), header_.hits);
        if (!sums) return Fail(sums.error());
        slice_checksums_ = std::move(*sums);
        pending_.clear();
        state_ = State::kPayload;
        break;
      }
      case State::kPayload: {
        // Up to the end of the current chunk's slice.
        const uint64_t within = payload_pos_ % header_.slice_bytes;
        const size_t n = static_cast<size_t>(
            std::min<uint64_t>({payload_left_, bytes.size(), header_.slice_bytes - within}));
        std::memcpy(PayloadAt(), bytes.data(), n);
        PayloadLanded(n);
        bytes = bytes.subspan(n);
        break;
      }
      case State::kTrailer: {
        if (!take(wire::kFrameTrailerBytes)) break;
        Result<wire::FrameTrailer> trailer = wire::ParseFrameTrailer(AsBytes(pending_));
        if (!trailer) return Fail(trailer.error());
        const uint32_t status = trailer->status;
        const uint64_t checksum = trailer->checksum;
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
        // A damaged slice fails its layer here, before the layer could be reported ready.
        if (!slice_mismatch_.ok()) return Fail(slice_mismatch_);
        if (header_.version == wire::kLayerwiseV1 && hash_->state.Digest() != checksum) {
          return Fail(
              DataLossError("layer " + std::to_string(frame_layer_) + ": frame checksum mismatch"));
        }
        on_layer_(frame_layer_, Status());
        layers_done_++;
        state_ = layers_done_ == header_.layer_count ? State::kDone : State::kFrameHeader;
        break;
      }
      case State::kErrorHeader: {
        if (!take(wire::kErrorRecordBytes)) break;  // the magic is in already
        Result<wire::ErrorRecordHead> head = wire::ParseErrorRecordHead(AsBytes(pending_));
        if (!head) return Fail(head.error());
        error_code_ = head->code;
        error_len_ = head->message_bytes;
        pending_.clear();
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
  if (!slice_mismatch_.ok()) return Fail(slice_mismatch_);  // the stream ended in that frame
  if (state_ != State::kDone || layers_done_ != header_.layer_count) {
    return Fail(Malformed("response ended after " + std::to_string(layers_done_) + " of " +
                          std::to_string(header_.layer_count) + " layers"));
  }
  return Status();
}

}  // namespace objectcache::client
