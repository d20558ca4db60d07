#include "wire/layerwise_wire.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace objectcache::wire {
namespace {

Status Malformed(const std::string& why) { return DataLossError("layerwise response: " + why); }

// A reader over exactly one record of `size` bytes.
Result<ByteReader> Record(std::span<const std::byte> bytes, size_t size, const char* what) {
  if (bytes.size() != size) {
    return Malformed(std::string(what) + " of " + std::to_string(bytes.size()) +
                     " bytes (expected " + std::to_string(size) + ")");
  }
  return ByteReader(bytes);
}

// A reader past the magic of one record that starts with the magic of `kind`.
Result<ByteReader> RecordOfKind(std::span<const std::byte> bytes, size_t size, RecordKind kind,
                                const char* what) {
  Result<ByteReader> r = Record(bytes, size, what);
  if (!r) return r.error();
  if (KindOfRecord(bytes.first(kRecordMagicBytes)) != kind) {
    return Malformed(std::string("expected ") + (kind == RecordKind::kFrame ? "a " : "an ") + what);
  }
  uint32_t magic = 0;
  (void)r->U32(&magic);
  return r;
}

}  // namespace

void PutResponseHeader(const ResponseHeader& h, ByteWriter* w) {
  w->Bytes(kResponseMagic, sizeof(kResponseMagic));
  w->U16(h.version);
  w->U16(0);  // flags
  w->U32(h.hits);
  w->U32(h.first_layer);
  w->U32(h.layer_count);
  w->U64(h.slice_bytes);
  w->U32(h.keys);
  w->U32(0);
}

Result<ResponseHeader> ParseResponseHeader(std::span<const std::byte> bytes) {
  Result<ByteReader> r = Record(bytes, kResponseHeaderBytes, "response header");
  if (!r) return r.error();
  char magic[sizeof(kResponseMagic)];
  uint16_t flags = 0;
  uint32_t reserved = 0;
  ResponseHeader h;
  (void)r->Bytes(magic, sizeof(magic));
  (void)r->U16(&h.version);
  (void)r->U16(&flags);
  (void)r->U32(&h.hits);
  (void)r->U32(&h.first_layer);
  (void)r->U32(&h.layer_count);
  (void)r->U64(&h.slice_bytes);
  (void)r->U32(&h.keys);
  (void)r->U32(&reserved);
  if (std::memcmp(magic, kResponseMagic, sizeof(magic)) != 0) {
    return Malformed("bad magic (not a layerwise response)");
  }
  if (h.version != kLayerwiseV1 && h.version != kLayerwiseV2) {
    return InvalidArgumentError("layerwise response version " + std::to_string(h.version));
  }
  if (h.hits > h.keys || h.slice_bytes == 0 || h.layer_count == 0) {
    return Malformed("inconsistent header");
  }
  return h;
}

RecordKind KindOfRecord(std::span<const std::byte> magic) {
  ByteReader r(magic);
  uint32_t m = 0;
  if (magic.size() != kRecordMagicBytes || !r.U32(&m)) return RecordKind::kOther;
  return m == kFrameMagic   ? RecordKind::kFrame
         : m == kErrorMagic ? RecordKind::kError
                            : RecordKind::kOther;
}

void PutFrameHeader(const FrameHeader& f, ByteWriter* w) {
  w->U32(kFrameMagic);
  w->U32(f.layer);
  w->U32(f.chunks);
  w->U32(0);
  w->U64(f.payload_bytes);
}

Result<FrameHeader> ParseFrameHeader(std::span<const std::byte> bytes) {
  Result<ByteReader> r = RecordOfKind(bytes, kFrameHeaderBytes, RecordKind::kFrame, "frame header");
  if (!r) return r.error();
  FrameHeader f;
  uint32_t reserved = 0;
  (void)r->U32(&f.layer);
  (void)r->U32(&f.chunks);
  (void)r->U32(&reserved);
  (void)r->U64(&f.payload_bytes);
  return f;
}

void PutSliceChecksums(std::span<const uint64_t> checksums, ByteWriter* w) {
  for (uint64_t c : checksums) w->U64(c);
}

Result<std::vector<uint64_t>> ParseSliceChecksums(std::span<const std::byte> bytes,
                                                  uint32_t chunks) {
  Result<ByteReader> r = Record(bytes, uint64_t{chunks} * 8, "slice checksums");
  if (!r) return r.error();
  std::vector<uint64_t> out(chunks);
  for (uint64_t& c : out) (void)r->U64(&c);
  return out;
}

void PutFrameTrailer(const FrameTrailer& t, ByteWriter* w) {
  w->U32(t.status);
  w->U32(0);
  w->U64(t.checksum);
}

Result<FrameTrailer> ParseFrameTrailer(std::span<const std::byte> bytes) {
  Result<ByteReader> r = Record(bytes, kFrameTrailerBytes, "frame trailer");
  if (!r) return r.error();
  FrameTrailer t;
  uint32_t reserved = 0;
  (void)r->U32(&t.status);
  (void)r->U32(&reserved);
  (void)r->U64(&t.checksum);
  return t;
}

void PutErrorRecord(uint32_t code, std::string_view message, ByteWriter* w) {
  message = message.substr(0, kMaxErrorMessage);
  w->U32(kErrorMagic);
  w->U32(code);
  w->U32(static_cast<uint32_t>(message.size()));
  w->U32(0);
  w->Bytes(message.data(), message.size());
}

Result<ErrorRecordHead> ParseErrorRecordHead(std::span<const std::byte> bytes) {
  Result<ByteReader> r = RecordOfKind(bytes, kErrorRecordBytes, RecordKind::kError, "error record");
  if (!r) return r.error();
  ErrorRecordHead e;
  uint32_t reserved = 0;
  (void)r->U32(&e.code);
  (void)r->U32(&e.message_bytes);
  (void)r->U32(&reserved);
  if (e.message_bytes > kMaxErrorMessage) return Malformed("error record too long");
  return e;
}

}  // namespace objectcache::wire
