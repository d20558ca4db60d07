// The layerwise response's records (docs/wire-format.md, "Response"), encoded and decoded in
// this one place: the server writes them, the client's and `objectcache fetch`'s decoder
// (src/client/layer_stream.h) and the tests read them.
//
// The response is a header, then per layer a frame (header, in version 2 the writer's checksum
// of each slice, payload, trailer), and after a failed frame an error record. The payload's bytes
// are not handled here: they go straight between the store or socket and their destination. Parse*
// functions take exactly one record's bytes and never trust them: every field is checked against
// what the format allows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/byte_order.h"
#include "objectcache/status.h"

namespace objectcache::wire {

// Version 1: the server verifies each slice and checksums each frame's payload as sent.
// Version 2: each frame carries every slice's checksum as its writer stored it in the chunk
// header; the client verifies slices against them, the server hashes nothing.
inline constexpr uint16_t kLayerwiseV1 = 1, kLayerwiseV2 = 2;
inline constexpr char kResponseMagic[8] = {'O', 'C', 'L', 'W', 'R', 'S', 'P', '1'};
inline constexpr uint32_t kFrameMagic = 0x464c434f;  // "OCLF" little-endian
inline constexpr uint32_t kErrorMagic = 0x454c434f;  // "OCLE"
inline constexpr size_t kResponseHeaderBytes = 40;
inline constexpr size_t kRecordMagicBytes = 4;   // what tells a frame from an error record
inline constexpr size_t kFrameHeaderBytes = 24;  // the magic included
inline constexpr size_t kFrameTrailerBytes = 16;
inline constexpr size_t kErrorRecordBytes = 16;  // the magic included, before the message
inline constexpr uint32_t kMaxErrorMessage = 64 << 10;

struct ResponseHeader {
  uint16_t version = kLayerwiseV1;
  uint32_t hits = 0;         // leading keys served
  uint32_t first_layer = 0;  // of the range
  uint32_t layer_count = 0;
  uint64_t slice_bytes = 0;  // the layout's layer slice
  uint32_t keys = 0;         // in the request
};

struct FrameHeader {
  uint32_t layer = 0;
  uint32_t chunks = 0;         // = hits
  uint64_t payload_bytes = 0;  // = hits x slice bytes
};

struct FrameTrailer {
  uint32_t status = 0;    // 0, or the canonical code of the failure that ended the stream
  uint64_t checksum = 0;  // version 1: XXH3-64 (seed 0) of the payload; version 2: 0
};

struct ErrorRecordHead {
  uint32_t code = 0;           // canonical status code
  uint32_t message_bytes = 0;  // the message that follows
};

void PutResponseHeader(const ResponseHeader& h, ByteWriter* w);
// DataLoss for a wrong size, bad magic or inconsistent fields (hits > keys, no layers, no slice
// bytes); InvalidArgument for a version this build does not speak.
Result<ResponseHeader> ParseResponseHeader(std::span<const std::byte> bytes);

enum class RecordKind { kFrame, kError, kOther };
// The record whose first kRecordMagicBytes bytes these are.
RecordKind KindOfRecord(std::span<const std::byte> magic);

void PutFrameHeader(const FrameHeader& f, ByteWriter* w);
// DataLoss for a wrong size or magic.
Result<FrameHeader> ParseFrameHeader(std::span<const std::byte> bytes);

// Version 2, after the frame header: the writer's checksum of each chunk's slice of the layer.
void PutSliceChecksums(std::span<const uint64_t> checksums, ByteWriter* w);
// `bytes`: exactly 8 x chunks bytes.
Result<std::vector<uint64_t>> ParseSliceChecksums(std::span<const std::byte> bytes,
                                                  uint32_t chunks);

void PutFrameTrailer(const FrameTrailer& t, ByteWriter* w);
Result<FrameTrailer> ParseFrameTrailer(std::span<const std::byte> bytes);

// The whole record: head and message (cut to kMaxErrorMessage bytes).
void PutErrorRecord(uint32_t code, std::string_view message, ByteWriter* w);
// DataLoss for a wrong size or magic, or a message longer than kMaxErrorMessage.
Result<ErrorRecordHead> ParseErrorRecordHead(std::span<const std::byte> bytes);

}  // namespace objectcache::wire
